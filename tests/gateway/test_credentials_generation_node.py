"""The token re-check driven by the credentials generation (qim/gateway/credentials_watch.py)
over real nodes, with no notice (the rows change by raw SQL, as a lost notice or a script
would leave them), so only the re-check can close the sockets: on SQLite, a deactivation by
raw SQL closes the user's sockets and not another's; sockets that AUTH while tokens are being
deleted under them (the race between a socket's AUTH and the generation moving) all end
closed; on PostgreSQL (two nodes), a token deleted, a user deactivated and the token table
truncated close the sockets on both nodes."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import QimDeployment, start_cluster, start_embedded
from tests.core.credential_helpers import WAIT_S, frames_until_closed, new_token, open_session, still_open
from tests.harness.personas import api_ok

ENV = {
    "QIM_TOKEN_RECHECK_S": "1",
    "QIM_AUTH_TOKEN_RATE_PER_ACCOUNT": "100/minute",
    "QIM_AUTH_TOKEN_RATE_PER_ADDRESS": "300/minute",
}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def embedded(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def cluster(postgres, pg_template, redis_proc, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


async def test_a_deactivation_by_raw_sql_closes_that_users_sockets(embedded: QimDeployment) -> None:
    acme = embedded.tenants["acme"]
    bob, keeper = acme.persona("rawbob"), acme.persona("rawkeeper")
    kept = await open_session(acme.node, new_token(keeper, "phone"), "phone")
    socks = [await open_session(acme.node, new_token(bob, device), device) for device in ("phone", "tablet")]
    embedded.db.query("UPDATE qim_user SET is_active = 0 WHERE username = ?", (bob.user_id,))
    for frames, code in await asyncio.gather(*(frames_until_closed(ws) for ws in socks)):
        assert code == 4403, frames
    assert await still_open(kept)
    await kept.close()


async def auth_racing_delete(embedded: QimDeployment, n: int) -> tuple[object | None, str]:
    """A socket AUTHs while its token row is deleted: (the socket if AUTH passed, its token)."""
    acme = embedded.tenants["acme"]
    token = new_token(acme.persona(f"racer{n}"), "phone")
    delete = asyncio.to_thread(embedded.db.query, "DELETE FROM qim_devicetoken WHERE digest = ?", (digest(token),))
    opened, _ = await asyncio.gather(open_session(acme.node, token, "phone"), delete, return_exceptions=True)
    return (None if isinstance(opened, BaseException) else opened), token


async def test_sockets_that_auth_while_their_tokens_go_all_end_closed(embedded: QimDeployment) -> None:
    raced = [await auth_racing_delete(embedded, n) for n in range(16)]
    passed = [ws for ws, _ in raced if ws is not None]
    for frames, code in await asyncio.gather(*(frames_until_closed(ws) for ws in passed)):
        assert code == 4403, frames
    # Each token is gone either way: a socket that passed AUTH was closed, one that did not was refused.
    for _, token in raced:
        assert embedded.db.count("qim_devicetoken", "digest = ?", (digest(token),)) == 0


async def test_a_generation_moving_at_every_step_costs_one_full_pass_a_period(embedded: QimDeployment) -> None:
    """Logins that prune a device's oldest token move the generation every few steps; a full
    pass at each would cost ten times the sliced re-check. At most one full pass per period
    (QIM_TOKEN_RECHECK_S, 1 s here) runs, and a token deleted meanwhile is still caught."""
    acme = embedded.tenants["acme"]
    churner, victim = acme.persona("churner"), acme.persona("churnvictim")
    for _ in range(10):  # the device's 10 kept tokens: from now on each login prunes one
        new_token(churner, "phone")
    ws = await open_session(acme.node, new_token(victim, "phone"), "phone")
    before = api_ok(acme.node, "GET", "node", acme.admin_token)["counters"].get("credentials_full_rechecks", 0)
    began = time.monotonic()
    for n in range(40):
        new_token(churner, "phone")
        if n == 5:
            embedded.db.query("DELETE FROM qim_devicetoken WHERE device_id IN (SELECT d.id FROM qim_device d "
                              "JOIN qim_user u ON u.id = d.user_id WHERE u.username = ?)", (victim.user_id,))
        await asyncio.sleep(0.05)
    frames, code = await frames_until_closed(ws)
    full = api_ok(acme.node, "GET", "node", acme.admin_token)["counters"]["credentials_full_rechecks"] - before
    elapsed = time.monotonic() - began
    assert code == 4403, frames
    assert 1 <= full <= elapsed / 1.0 + 2, (full, elapsed)


def pg_execute(deployment: QimDeployment, sql: str, params: tuple = ()) -> None:
    """A statement with no result (TRUNCATE, or a DELETE the harness's query would fetch)."""
    db = deployment.db
    with psycopg.connect(db.pg.url(db.dbname)) as conn:
        conn.execute(sql, params)


async def sessions_on_both_nodes(deployment: QimDeployment, name: str) -> tuple[str, list[object]]:
    """A new user's user id, and a socket of theirs on each node."""
    persona = deployment.tenants["acme"].persona(name)
    nodes = enumerate(deployment.nodes)
    return persona.user_id, [await open_session(node, new_token(persona, f"d{i}", node), f"d{i}") for i, node in nodes]


async def all_closed_4403(socks: list[object]) -> None:
    for frames, code in await asyncio.gather(*(frames_until_closed(ws, WAIT_S) for ws in socks)):
        assert code == 4403, frames


async def test_postgres_token_delete_and_deactivation_close_on_both_nodes(cluster: QimDeployment) -> None:
    _, keeper = await sessions_on_both_nodes(cluster, "pgkeeper")
    user_id, deleted = await sessions_on_both_nodes(cluster, "pgdeleted")
    pg_execute(cluster, "DELETE FROM qim_devicetoken WHERE device_id IN (SELECT d.id FROM qim_device d "
               "JOIN qim_user u ON u.id = d.user_id WHERE u.username = %s)", (user_id,))
    await all_closed_4403(deleted)
    user_id, deactivated = await sessions_on_both_nodes(cluster, "pgdeactivated")
    pg_execute(cluster, "UPDATE qim_user SET is_active = false WHERE username = %s", (user_id,))
    await all_closed_4403(deactivated)
    for ws in keeper:
        assert await still_open(ws)
        await ws.close()


async def test_postgres_truncate_of_the_tokens_closes_every_socket(cluster: QimDeployment) -> None:
    _, socks = await sessions_on_both_nodes(cluster, "pgtruncated")
    pg_execute(cluster, "TRUNCATE qim_devicetoken")
    await all_closed_4403(socks)
