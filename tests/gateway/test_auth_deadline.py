"""The AUTH deadline counts until the first frame arrives, not until its answer: an AUTH that
reached the server in time is answered (AUTH_OK here) even when its token lookup outlasts
the deadline, never closed 4408 under it. On PostgreSQL, whose lock makes the lookup wait."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import websockets

from tests.conftest import QimDeployment, start_cluster
from tests.harness.services import PostgresServer

AUTH_TIMEOUT_S = 6.0


@pytest.fixture(scope="module")
def slow_db(postgres: PostgresServer, pg_template: str, redis_proc, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, nodes=1,
                               extra_env={"QIM_AUTH_TIMEOUT_S": str(AUTH_TIMEOUT_S)})
    yield deployment
    deployment.stop()


async def lookup_waiting(db_url: str, timeout: float = 60.0) -> float:
    """When a backend was first seen waiting for a lock on the token table (the AUTH's lookup)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'qim_devicetoken'::regclass"
            ).fetchone()[0]
            if waiting:
                return time.monotonic()
            await asyncio.sleep(0.02)
    raise AssertionError("the AUTH's lookup never reached the database")


async def test_an_auth_in_time_is_answered_however_long_its_lookup_takes(slow_db: QimDeployment) -> None:
    tenant = slow_db.tenants["acme"]
    alice = tenant.persona("alice")
    token = alice.token()
    db_url = slow_db.db.pg.url(slow_db.db.dbname)
    with psycopg.connect(db_url) as locker:
        locker.execute("LOCK TABLE qim_devicetoken IN ACCESS EXCLUSIVE MODE")
        connecting = time.monotonic()
        ws = await websockets.connect(tenant.node.ws_url)
        connected = time.monotonic()
        await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": "phone", "req_id": "a1"}))
        seen = await lookup_waiting(db_url)
        # The server's deadline is at least AUTH_TIMEOUT_S after `connecting`: the lookup began
        # before it, so the AUTH was in time whatever the machine's load.
        assert seen - connecting < AUTH_TIMEOUT_S, "the node took the whole deadline to read one frame"
        # Hold the lookup until the deadline has surely passed (it is at most this after accept).
        while time.monotonic() < connected + AUTH_TIMEOUT_S + 2.0:
            await asyncio.sleep(0.1)
        locker.rollback()
    try:
        answer = json.loads(await asyncio.wait_for(ws.recv(), 60))
        assert answer["type"] == "AUTH_OK" and answer["req_id"] == "a1", answer
        await ws.send(json.dumps({"type": "PING", "req_id": "p1"}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] == "PONG"
    finally:
        await ws.close()
