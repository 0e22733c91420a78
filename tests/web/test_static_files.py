"""Static files served by daphne itself (whitenoise): the admin's stylesheets with hashed
names and compressed copies, the API docs' Swagger UI and Redoc from the sidecar, nothing
from a CDN; `/` (and the web client's service worker at `/sw.js`) answers the web client or a
JSON error, never a 500."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.conftest import QimDeployment, start_embedded

LINKS = re.compile(r'(?:href|src)="([^"]+)"')


def page_links(url: str) -> list[str]:
    page = httpx.get(url, timeout=30)
    assert page.status_code == 200, page.text[:500]
    return LINKS.findall(page.text)


def test_admin_login_page_links_hashed_stylesheets_that_are_served(embedded: QimDeployment) -> None:
    base = embedded.node.http_url
    sheets = [link for link in page_links(f"{base}/admin/login/") if link.endswith(".css")]
    assert any(re.search(r"/static/admin/css/base\.[0-9a-f]{12}\.css$", link) for link in sheets), sheets
    for link in sheets:
        answer = httpx.get(f"{base}{link}", headers={"Accept-Encoding": "gzip"}, timeout=30)
        assert answer.status_code == 200, link
        assert answer.headers["content-type"].startswith("text/css"), link
        # Hashed names are cached forever; the compressed copy collectstatic made is served.
        assert "immutable" in answer.headers.get("cache-control", ""), answer.headers
        assert answer.headers.get("content-encoding") in ("gzip", "br"), answer.headers


def test_api_docs_load_only_files_of_this_server(embedded: QimDeployment) -> None:
    base = embedded.node.http_url
    for page in ("/api/v1/docs/", "/api/v1/redoc/"):
        links = page_links(f"{base}{page}")
        assert links and all(link.startswith("/") for link in links), (page, links)
        for link in links:
            assert httpx.get(f"{base}{link}", timeout=30).status_code == 200, (page, link)
        html = httpx.get(f"{base}{page}", timeout=30).text
        assert "cdn" not in html.lower() and "unpkg" not in html.lower(), page


def test_unknown_static_file_is_a_plain_404(embedded: QimDeployment) -> None:
    answer = httpx.get(f"{embedded.node.http_url}/static/admin/css/nope.css", timeout=30)
    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"


def test_root_answers_the_web_client_or_says_how_to_build_it(embedded: QimDeployment) -> None:
    answer = httpx.get(f"{embedded.node.http_url}/", timeout=30)
    if answer.status_code == 200:
        assert 'id="app"' in answer.text
        assert "default-src 'self'" in answer.headers["content-security-policy"]
    else:
        # Not built (404), or built after this node collected its static files (503: on two
        # xdist workers another file's test may be building it right now); both say how.
        body = answer.json()
        assert (answer.status_code, body["code"]) in {(404, "not_found"), (503, "unavailable")}, answer.text
        assert "make web" in body["message"]
    posted = httpx.post(f"{embedded.node.http_url}/", timeout=30)
    assert posted.status_code == 405 and posted.json()["code"] == "method_not_allowed"


def test_service_worker_is_served_at_the_root_or_a_json_404(embedded: QimDeployment, sqlite_template: Path,
                                                            work_dir: Path, tmp_path: Path) -> None:
    """Built and collected: JavaScript whose scope may be `/`. Where the collected files lack
    it (a node whose STATIC_ROOT was never filled): 404 {code, message}, never a 500."""
    answer = httpx.get(f"{embedded.node.http_url}/sw.js", timeout=30)
    if answer.status_code == 200:
        assert answer.headers["content-type"].startswith("text/javascript")
        assert answer.headers["service-worker-allowed"] == "/"
    else:
        assert answer.status_code == 404 and answer.json()["code"] == "not_found", answer.text
    empty = tmp_path / "static-never-collected"
    empty.mkdir()
    bare = start_embedded(sqlite_template, work_dir, extra_env={"QIM_STATIC_ROOT": str(empty)})
    try:
        missing = httpx.get(f"{bare.node.http_url}/sw.js", timeout=30)
        assert missing.status_code == 404 and missing.json()["code"] == "not_found", missing.text
        assert "make web" in missing.json()["message"]
        posted = httpx.post(f"{bare.node.http_url}/sw.js", timeout=30)
        assert posted.status_code == 405 and posted.json()["code"] == "method_not_allowed"
    finally:
        bare.stop()
