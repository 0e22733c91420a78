"""The default keepalive (QIM_WS_KEEPALIVE=pong, qim/gateway/heartbeat.py) over a real daphne:
an idle socket that never sends anything gets an unsolicited empty Pong every interval, no
Ping, and stays open and served; a peer that stops taking data is aborted by the kernel
(TCP_USER_TIMEOUT, here 2 s: a receive window kept at zero counts on Linux 5.9+, which is how
an unprivileged test stands in for a vanished peer that never acknowledges) and its user is
seen offline by a watcher."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import api_ok
from tests.harness.ping_socket import CLOSE, PingSocket


@pytest.fixture(scope="module")
def heartbeats(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One node sending heartbeats after 1 s of silence, aborting sockets whose data stays
    unacknowledged (or whose window stays shut) for 2 s; outbound buffers too large to close a
    stalled reader first."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_WS_PING_INTERVAL_S": "1", "QIM_WS_USER_TIMEOUT_S": "2",
        "QIM_MAX_OUTBOUND_BUFFER_BYTES": str(256 * 1024 * 1024), "QIM_PER_USER_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


async def test_an_idle_socket_gets_heartbeats_and_stays_served(heartbeats: QimDeployment) -> None:
    alice = heartbeats.tenants["acme"].persona("alice")
    sock = await PingSocket.open(heartbeats.node.port)
    try:
        await sock.authenticate(alice.token())
        deadline = time.monotonic() + 60
        while len(sock.pongs) < 4:
            assert time.monotonic() < deadline, f"only {len(sock.pongs)} heartbeats in 60 s at a 1 s interval"
            opcode, _ = await sock.next_frame(60)
            assert opcode != CLOSE, "an idle socket was closed although its peer is alive"
        assert sock.pongs == [b""] * len(sock.pongs)  # empty, unsolicited Pongs
        assert sock.pings == 0, "pong mode sent a Ping"
        # Still authenticated and served after several intervals of silence from the client.
        await sock.assert_served()
    finally:
        sock.close()


async def test_a_peer_that_takes_no_data_is_aborted_and_seen_offline(heartbeats: QimDeployment) -> None:
    acme = heartbeats.tenants["acme"]
    sender, bob = acme.persona("sender"), acme.persona("bob")
    conversation = api_ok(acme.node, "POST", "conversations", sender.token(),
                          json={"kind": "group", "member_user_ids": [bob.user_id]})["conversation_id"]
    watcher, s = await acme.persona("carol").connect(), await sender.connect()
    stalled = await PingSocket.open(heartbeats.node.port, rcvbuf=4096)
    try:
        await stalled.authenticate(bob.token())
        assert await watcher.subscribe_presence([bob.user_id]) == {bob.user_id: True}
        stalled.stop_reading()
        start = time.monotonic()
        for n in range(40):  # 160 KB of pushes against a window of a few KB
            await s.request("SEND", conversation_id=conversation, client_msg_id=f"m{n}",
                            content_type="text", payload={"text": "x" * 4000})
        gone = await watcher.next_push(timeout=60, type="PRESENCE")
        assert (gone["user_id"], gone["online"]) == (bob.user_id, False)
        assert time.monotonic() - start < 60
        # The node goes on serving the others.
        assert (await s.request("CONVERSATIONS"))["type"] == "CONVERSATION_LIST"
    finally:
        stalled.close()
        await watcher.close()
        await s.close()

