"""The multi-node set-up (PostgreSQL + Redis, two daphne nodes) serves the static files from
every node: each answers the admin's hashed stylesheet and the API docs' bundle itself."""

from __future__ import annotations

import re

import httpx

from tests.conftest import QimDeployment


def test_every_node_serves_the_admin_stylesheet_and_the_docs_bundle(cluster: QimDeployment) -> None:
    for node in cluster.nodes:
        login = httpx.get(f"{node.http_url}/admin/login/", timeout=30)
        assert login.status_code == 200, node.node_id
        sheet = re.search(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', login.text)
        assert sheet, login.text[:500]
        answer = httpx.get(f"{node.http_url}{sheet.group(1)}", timeout=30)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/css"), node.node_id
        docs = httpx.get(f"{node.http_url}/api/v1/docs/", timeout=30)
        bundle = re.search(r'src="(/static/drf_spectacular_sidecar/[^"]+\.js)"', docs.text)
        assert bundle, docs.text[:500]
        assert httpx.get(f"{node.http_url}{bundle.group(1)}", timeout=30).status_code == 200, node.node_id
