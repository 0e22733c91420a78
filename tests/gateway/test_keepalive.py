"""The ping keepalive (QIM_WS_KEEPALIVE=ping) over a real daphne, with daphne's per-connection timers replaced by the due
ones (qim/server/daphne_timers.py): an idle socket is pinged every QIM_WS_PING_INTERVAL_S and
stays open while it answers; one that stops answering is closed after daphne's --ping-timeout
and its user is seen offline; a closed socket's application is reaped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, TENANT_NAMES
from tests.harness.ping_socket import CLOSE, PingSocket
from tests.harness.qim_process import QimNode, sqlite_database


@pytest.fixture(scope="module")
def keepalive(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One embedded node in ping mode pinging idle sockets every second, closing them 2 s after an
    unanswered ping."""
    db = sqlite_database(sqlite_template, work_dir, "keepalive")
    env = {**db.env, "QIM_VAR_DIR": str(work_dir), "QIM_WS_PING_INTERVAL_S": "1",
           "QIM_WS_KEEPALIVE": "ping"}
    node = QimNode(node_id="keepalive", env=env, log_dir=work_dir, daphne_args=("--ping-timeout", "2"))
    deployment = QimDeployment(db=db, nodes=[node], env=env)
    node.start()
    for name in TENANT_NAMES:
        deployment.bootstrap(name)
    yield deployment
    deployment.stop()


async def test_an_idle_socket_that_answers_pings_stays_open(keepalive: QimDeployment) -> None:
    alice = keepalive.tenants["acme"].persona("alice")
    sock = await PingSocket.open(keepalive.node.port)
    try:
        await sock.authenticate(alice.token())
        deadline = time.monotonic() + 60
        while sock.pings < 3:
            assert time.monotonic() < deadline, f"only {sock.pings} pings in 60 s at a 1 s interval"
            opcode, _ = await sock.next_frame(60)
            assert opcode != CLOSE, "closed although every ping was answered"
        # Still authenticated and served after several ping rounds (more than the ping timeout).
        await sock.assert_served()
    finally:
        sock.close()


async def test_a_socket_that_stops_answering_pings_is_closed_and_seen_offline(keepalive: QimDeployment) -> None:
    acme = keepalive.tenants["acme"]
    bob = acme.persona("bob")
    watcher = await acme.persona("carol").connect()
    silent = await PingSocket.open(keepalive.node.port)
    try:
        await silent.authenticate(bob.token())
        assert await watcher.subscribe_presence([bob.user_id]) == {bob.user_id: True}
        silent.answering = False
        deadline = time.monotonic() + 60
        while (await silent.next_frame(60))[0] != CLOSE:
            assert time.monotonic() < deadline, "a socket that never answers pings was not closed"
        assert silent.pings >= 1
        gone = await watcher.next_push(timeout=30, type="PRESENCE")
        assert (gone["user_id"], gone["online"]) == (bob.user_id, False)
    finally:
        silent.close()
        await watcher.close()


async def test_closed_sockets_leave_the_node(keepalive: QimDeployment) -> None:
    """Many sockets opened and closed while the timers run: each leaves the node's index and
    the node keeps serving (the reaper visits only the marked protocols)."""
    acme = keepalive.tenants["acme"]
    dave = acme.persona("dave")
    token = dave.token()
    sockets = [await PingSocket.open(keepalive.node.port) for _ in range(20)]
    for sock in sockets:
        await sock.authenticate(token)
    stats = lambda: keepalive.node.stats(acme.admin_token)  # noqa: E731
    assert stats()["connections"] >= 20
    for sock in sockets:
        sock.close()
    deadline = time.monotonic() + 60
    while stats()["connections"] > 0:
        assert time.monotonic() < deadline, f"{stats()['connections']} connections left after all closed"
        await asyncio.sleep(0.2)
    again = await PingSocket.open(keepalive.node.port)
    try:
        await again.authenticate(token)
    finally:
        again.close()
