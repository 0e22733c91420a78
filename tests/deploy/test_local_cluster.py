"""`make cluster`'s entrypoint, started for real: its own PostgreSQL and Redis, two daphne
nodes, a push worker and nginx in front. Clients talk only to the proxy; both nodes carry
sockets, a message crosses them, nginx serves the static files itself, /metrics is not
proxied, an offline device's push is drained by the worker, and SIGTERM stops it all."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from qimclient import QimClient
from tests.harness.qim_process import BASE_ENV, REPO
from tests.harness.services import free_port

PASSWORD = "cluster-password"
READY_TIMEOUT_S = 240


@dataclass
class LocalCluster:
    process: subprocess.Popen
    url: str
    node_ports: list[int]
    pg_port: int
    directory: Path
    admin_token: str

    def api(self, method: str, path: str, token: str | None = None, base: str | None = None, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
        headers = {"Authorization": f"Token {token}"} if token else {}
        return httpx.request(method, f"{base or self.url}/api/v1/{path}", headers=headers, timeout=30, **kwargs)

    def api_ok(self, method: str, path: str, token: str | None = None, **kwargs) -> dict:  # type: ignore[no-untyped-def]
        answer = self.api(method, path, token, **kwargs)
        assert answer.status_code < 300, (method, path, answer.status_code, answer.text)
        return answer.json() if answer.content else {}

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws/v1"


def _read_ready_line(process: subprocess.Popen, timeout: float) -> dict:
    """The JSON line `all` prints once everything answers; fails with its output if it died."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not selector.select(timeout=1.0):
            if process.poll() is not None:
                break
            continue
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("{") and '"ready"' in line:
            return json.loads(line)
    raise AssertionError(f"the cluster did not get ready (exit {process.poll()}):\n{''.join(seen)[-3000:]}")


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[LocalCluster]:
    # Not under pytest's 0700 basetemp: as root the script runs PostgreSQL as `postgres`,
    # which must be able to reach its data directory.
    directory = Path(tempfile.mkdtemp(prefix="qim-local-cluster-"))
    directory.chmod(0o755)
    port, node_ports, pg_port, redis_port = free_port(), [free_port(), free_port()], free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QIM_")}
    env.update({k: v for k, v in BASE_ENV.items() if k != "QIM_SECRET_KEY"})
    env.update({"QIM_LOG_LEVEL": "INFO", "QIM_PUSH_SENDER": "qim.push.senders.LogSender",
                "QIM_PUSH_RETRY_BASE_S": "0.2", "QIM_DEMO_PASSWORD": PASSWORD})
    argv = [sys.executable, "deploy/cluster.py", "all", "--dir", str(directory), "--port", str(port),
            "--node-ports", ",".join(map(str, node_ports)), "--pg-port", str(pg_port), "--redis-port", str(redis_port)]
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready = _read_ready_line(process, READY_TIMEOUT_S)
        admin = json.loads((directory / "demo-admin.json").read_text())
        yield LocalCluster(process, ready["ready"], node_ports, pg_port, directory, admin["token"])
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(directory, ignore_errors=True)


def make_user(cluster: LocalCluster, name: str) -> str:
    cluster.api_ok("POST", "users", cluster.admin_token, json={"username": name, "password": PASSWORD})
    return name


def token_for(cluster: LocalCluster, user: str, device: str) -> str:
    return cluster.api_ok("POST", "auth/token", json={"tenant": "demo", "username": user, "password": PASSWORD,
                                                     "device_id": device})["token"]


def node_connections(cluster: LocalCluster) -> dict[str, int]:
    """Sockets per node, asked of each node directly (not through the proxy)."""
    counts = {}
    for port in cluster.node_ports:
        stats = cluster.api_ok("GET", "node", cluster.admin_token, base=f"http://127.0.0.1:{port}")
        counts[stats["node_id"]] = stats["connections"]
    return counts


async def test_clients_through_the_proxy_reach_both_nodes_and_each_other(local_cluster: LocalCluster) -> None:
    users = [make_user(local_cluster, f"member-{n}") for n in range(6)]
    conversation = local_cluster.api_ok(
        "POST", "conversations", token_for(local_cluster, users[0], "setup"),
        json={"kind": "group", "member_user_ids": users[1:]},
    )["conversation_id"]
    clients = []
    try:
        for user in users:
            client = QimClient(local_cluster.ws_url, token_for(local_cluster, user, "phone"), "phone", reconnect=False)
            await client.connect()
            clients.append(client)
        # least_conn spreads sockets over both nodes; AUTH_OK names the node that took each one.
        nodes_of_clients = {c.auth_ok["node_id"] for c in clients if c.auth_ok}
        assert len(nodes_of_clients) == 2, nodes_of_clients
        counts = node_connections(local_cluster)
        assert sorted(counts) == sorted(nodes_of_clients) and all(n >= 1 for n in counts.values()), counts
        assert sum(counts.values()) == len(clients), counts

        sent = await clients[0].request("SEND", conversation_id=conversation, client_msg_id="through-proxy",
                                        content_type="text", payload={"text": "across the nodes"})
        for client in clients[1:]:
            push = await client.next_push(timeout=60, type="EVENT")
            assert push["event"]["message"]["conversation_seq"] == sent["conversation_seq"]
            assert push["event"]["message"]["payload"] == {"text": "across the nodes"}
    finally:
        for client in clients:
            await client.close()


def test_nginx_serves_static_files_and_never_proxies_metrics(local_cluster: LocalCluster) -> None:
    login = httpx.get(f"{local_cluster.url}/admin/login/", timeout=30)
    assert login.status_code == 200 and "csrfmiddlewaretoken" in login.text
    css = next(part.split('"')[0] for part in login.text.split('href="')[1:] if part.split('"')[0].endswith(".css"))
    answer = httpx.get(f"{local_cluster.url}{css}", timeout=30)
    assert answer.status_code == 200 and answer.headers["server"].startswith("nginx")
    assert "text/css" in answer.headers["content-type"]
    for port in local_cluster.node_ports:  # no node saw the request: nginx answered from disk
        log = (local_cluster.directory / f"node-{local_cluster.node_ports.index(port) + 1}.log").read_text()
        assert css not in log
    assert httpx.get(f"{local_cluster.url}/metrics", timeout=30).status_code == 404
    assert httpx.get(f"{local_cluster.url}/api/v1/health", timeout=30).json()["status"] == "ok"


async def test_the_worker_drains_an_offline_devices_push(local_cluster: LocalCluster) -> None:
    sender, offline = make_user(local_cluster, "pusher"), make_user(local_cluster, "sleeper")
    offline_token = token_for(local_cluster, offline, "tablet")
    local_cluster.api_ok("POST", "devices/tablet/push", offline_token,
                         json={"platform": "android", "push_token": "fcm-token-of-the-tablet"})
    sender_token = token_for(local_cluster, sender, "phone")
    conversation = local_cluster.api_ok("POST", "conversations", sender_token,
                                         json={"kind": "direct", "member_user_ids": [offline]})["conversation_id"]
    client = QimClient(local_cluster.ws_url, sender_token, "phone", reconnect=False)
    await client.connect()
    try:
        await client.request("SEND", conversation_id=conversation, client_msg_id="to-the-sleeper",
                             content_type="text", payload={"text": "wake up"})
    finally:
        await client.close()
    url = f"postgresql://postgres@127.0.0.1:{local_cluster.pg_port}/qim"
    deadline = time.monotonic() + 90
    state = None
    while time.monotonic() < deadline:
        with psycopg.connect(url) as db:
            rows = db.execute(
                "SELECT t.state FROM qim_pushtask t JOIN qim_device d ON d.id = t.device_id "
                "WHERE d.device_id = 'tablet' AND t.payload->>'conversation_id' = %s", (str(conversation),)
            ).fetchall()
        state = rows[0][0] if rows else None
        if state == "sent":
            break
        await asyncio.sleep(0.5)
    assert state == "sent"
    # The cluster's worker (LogSender here) took it, not some other process.
    assert f"user={offline} device=tablet platform=android" in (local_cluster.directory / "worker.log").read_text()


def test_sigterm_stops_every_part(tmp_path: Path, local_cluster: LocalCluster) -> None:
    """Last in this module: the fixture's cluster stops on SIGTERM and frees every port."""
    local_cluster.process.send_signal(signal.SIGTERM)
    assert local_cluster.process.wait(timeout=90) == 0
    for port in [*local_cluster.node_ports, local_cluster.pg_port, int(local_cluster.url.rsplit(":", 1)[1])]:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
