"""Issue #21 item 2: GET /api/v1/ready on a real node answers 200 naming what it checked, and 503
naming what failed while Redis is killed or paused or PostgreSQL stopped, then 200 again once
they are back; /api/v1/health (liveness) stays 200 throughout; no password or host in answers."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import QimDeployment
from tests.harness.qim_process import QimNode, make_pg_template, pg_database
from tests.harness.redis_server import RedisServer
from tests.harness.services import PostgresServer

pytestmark = pytest.mark.faults

PATIENCE_S = 60
# PostgreSQL trusts loopback and ignores it, but the node holds it in its database URL: it must
# not show up in an answer or the log.
DB_PASSWORD = "pg-secret-never-shown"


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PostgresServer]:
    """Its own PostgreSQL and Redis: stopping the session's would break every other test."""
    server = PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def probed(own_postgres: PostgresServer, own_redis: RedisServer, work_dir: Path) -> Iterator[QimDeployment]:
    db = pg_database(own_postgres, make_pg_template(own_postgres), "qim_ready")
    env = {
        "QIM_DATABASE_URL": f"postgres://postgres:{DB_PASSWORD}@127.0.0.1:{own_postgres.port}/qim_ready",
        "QIM_REDIS_URL": own_redis.url, "QIM_VAR_DIR": str(work_dir), "QIM_READY_TIMEOUT_S": "2",
    }
    deployment = QimDeployment(db=db, nodes=[QimNode(node_id="ready1", env=env, log_dir=work_dir)], env=env)
    deployment.node.start()
    yield deployment
    deployment.stop()


def probe(node: QimNode, path: str = "ready", method: str = "GET") -> tuple[int, dict[str, Any]]:
    answer = httpx.request(method, f"{node.http_url}/api/v1/{path}", timeout=30)
    assert DB_PASSWORD not in answer.text and "127.0.0.1" not in answer.text, answer.text
    return answer.status_code, answer.json()


def probe_until(node: QimNode, wanted: Callable[[int, dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """Probe until `wanted(status, body)`: a check may need a probe or two to see a change."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        status, body = probe(node)
        if wanted(status, body):
            return body
        assert time.monotonic() < deadline, f"not {what} after {PATIENCE_S} s: {status} {body}"
        time.sleep(0.2)


def is_ready(status: int, body: dict[str, Any]) -> bool:
    return status == 200


def failing(*names: str) -> Callable[[int, dict[str, Any]], bool]:
    return lambda status, body: status == 503 and body.get("failed") == list(names)


def assert_still_alive(node: QimNode) -> None:
    assert probe(node, "health") == (200, {"status": "ok", "node_id": node.node_id})


def test_a_node_whose_database_and_redis_answer_is_ready(probed: QimDeployment) -> None:
    status, body = probe(probed.node)
    assert (status, body["status"], body["node_id"]) == (200, "ready", "ready1")
    assert set(body["checks"]) == {"database", "redis"}
    assert all(check["ok"] and check["ms"] >= 0 for check in body["checks"].values())
    assert probe(probed.node, method="POST")[1]["code"] == "method_not_allowed"


def test_redis_killed_is_503_naming_redis_until_it_is_back(probed: QimDeployment, own_redis: RedisServer) -> None:
    own_redis.kill()
    body = probe_until(probed.node, failing("redis"), "503 naming redis")
    assert (body["code"], body["status"], body["retry_after_ms"]) == ("unavailable", "not_ready", 1000)
    assert "redis" in body["message"]
    assert (body["checks"]["redis"]["ok"], body["checks"]["redis"]["error"]) == (False, "failed")
    assert body["checks"]["database"]["ok"] is True
    assert_still_alive(probed.node)
    own_redis.start()
    probe_until(probed.node, is_ready, "ready with redis back")


def test_redis_paused_is_503_by_the_timeout(probed: QimDeployment, own_redis: RedisServer) -> None:
    """A Redis that accepts connections but answers nothing (SIGSTOP) fails by the timeout."""
    assert own_redis.process is not None
    os.kill(own_redis.process.pid, signal.SIGSTOP)
    try:
        body = probe_until(probed.node, failing("redis"), "503 naming redis")
        assert body["checks"]["redis"] == {"ok": False, "error": "timeout", "detail": "no answer within 2 s"}
        assert_still_alive(probed.node)
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
    probe_until(probed.node, is_ready, "ready with redis answering again")


def test_postgresql_stopped_is_503_naming_the_database_until_it_is_back(
    probed: QimDeployment, own_postgres: PostgresServer, own_redis: RedisServer
) -> None:
    own_postgres.halt("fast")
    try:
        body = probe_until(probed.node, failing("database"), "503 naming the database")
        checks = body["checks"]
        assert (body["code"], checks["database"]["ok"], checks["redis"]["ok"]) == ("unavailable", False, True)
        assert "database" in body["message"]
        assert_still_alive(probed.node)
        own_redis.kill()  # both away: both named
        probe_until(probed.node, failing("database", "redis"), "503 naming both")
    finally:
        own_postgres.resume()
        if own_redis.process is None or own_redis.process.poll() is not None:
            own_redis.start()
    body = probe_until(probed.node, is_ready, "ready with both back")
    assert set(body["checks"]) == {"database", "redis"}
    log = probed.node.log_path.read_text()
    assert "readiness: database check failed" in log and "readiness: redis check failed" in log
    assert DB_PASSWORD not in log
    assert "Service Unavailable: /api/v1/ready" not in log  # failing probes are not ERRORs


def test_an_embedded_node_checks_its_database_only(embedded: QimDeployment) -> None:
    status, body = probe(embedded.node)
    assert (status, list(body["checks"]), body["checks"]["database"]["ok"]) == (200, ["database"], True)
