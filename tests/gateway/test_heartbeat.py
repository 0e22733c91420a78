"""The keepalive without a reply (qim/server/heartbeat.py) over a real daphne.

QIM_WS_KEEPALIVE=pong: an idle socket that never sends anything gets an unsolicited empty Pong
every interval, no Ping, and stays open and served. auto (the default): a socket straight from
its client gets no frame at all but the kernel's TCP keepalive (its keepalive timer, read from
/proc/net/tcp, is armed on the node's side and keeps re-arming as probes are answered), while a
socket whose upgrade came through a proxy (an X-Forwarded-For header) gets the Pongs. In both
modes a peer that stops taking data is aborted by the kernel (TCP_USER_TIMEOUT, here 2 s: a
receive window kept at zero counts on Linux 5.9+, which is how an unprivileged test stands in
for a vanished peer that never acknowledges) and its user is seen offline by a watcher."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import api_ok
from tests.harness.ping_socket import CLOSE, PingSocket

# One second between keepalives, aborted after 2 s unacknowledged; outbound buffers too large
# to close a stalled reader first.
FAST_KEEPALIVE = {
    "QIM_WS_PING_INTERVAL_S": "1", "QIM_WS_USER_TIMEOUT_S": "2",
    "QIM_MAX_OUTBOUND_BUFFER_BYTES": str(256 * 1024 * 1024), "QIM_PER_USER_MSG_RATE": "1000",
}
# /proc/net/tcp's "tr" column: which timer the kernel has armed on a socket (2: keepalive).
KEEPALIVE_TIMER = 2


@pytest.fixture(scope="module")
def heartbeats(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One node sending Pong heartbeats to every socket after 1 s of silence."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={**FAST_KEEPALIVE, "QIM_WS_KEEPALIVE": "pong"})
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def auto(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One node in the default keepalive mode, at the same pace."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env=FAST_KEEPALIVE)
    yield deployment
    deployment.stop()


def kernel_timer(node_port: int, client_port: int) -> int:
    """The timer the kernel has armed on the node's end of one loopback connection
    (/proc/net/tcp: local address, remote address, state, queues, "timer:when", ...)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1].split(":")[1], fields[2].split(":")[1]
        if (int(local, 16), int(remote, 16)) == (node_port, client_port):
            return int(fields[5].split(":")[0], 16)
    raise AssertionError(f"no connection from :{client_port} to :{node_port} in /proc/net/tcp")


async def open_counted(deployment: QimDeployment, counter: str, headers: dict[str, str] | None = None) -> PingSocket:
    """A socket authenticated as alice, checked to have moved the node's `counter` by one."""
    admin = deployment.tenants["acme"].admin_token
    before = deployment.node.stats(admin)["counters"].get(counter, 0)
    sock = await PingSocket.open(deployment.node.port, headers=headers)
    await sock.authenticate(deployment.tenants["acme"].persona("alice").token())
    assert deployment.node.stats(admin)["counters"][counter] == before + 1
    return sock


def client_port(sock: PingSocket) -> int:
    return sock.writer.get_extra_info("sockname")[1]


@pytest.mark.tuned
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


@pytest.mark.tuned
async def test_a_direct_socket_gets_the_kernels_keepalive_and_no_frames(auto: QimDeployment) -> None:
    sock = await open_counted(auto, "keepalive_by_kernel")
    try:
        timers = []
        for _ in range(4):  # four intervals of silence: the kernel probes, the node writes nothing
            with pytest.raises(asyncio.TimeoutError):
                await sock.next_frame(1.2)
            timers.append(kernel_timer(auto.node.port, client_port(sock)))
        assert sock.pongs == [] and sock.pings == 0, "a direct socket got keepalive frames in auto mode"
        assert timers == [KEEPALIVE_TIMER] * 4, f"the node's keepalive timer is not armed: {timers}"
        await sock.assert_served()
    finally:
        sock.close()


@pytest.mark.tuned
async def test_a_socket_through_a_proxy_gets_heartbeats_in_auto_mode(auto: QimDeployment) -> None:
    sock = await open_counted(auto, "keepalive_by_frames", headers={"X-Forwarded-For": "203.0.113.7"})
    try:
        deadline = time.monotonic() + 60
        while len(sock.pongs) < 3:
            assert time.monotonic() < deadline, f"only {len(sock.pongs)} heartbeats in 60 s at a 1 s interval"
            opcode, _ = await sock.next_frame(60)
            assert opcode != CLOSE, "an idle socket was closed although its peer is alive"
        assert kernel_timer(auto.node.port, client_port(sock)) != KEEPALIVE_TIMER
    finally:
        sock.close()


@pytest.mark.parametrize("mode", ["pong", "auto"])
async def test_a_peer_that_takes_no_data_is_aborted_and_seen_offline(
        mode: str, heartbeats: QimDeployment, auto: QimDeployment) -> None:
    deployment = heartbeats if mode == "pong" else auto
    acme = deployment.tenants["acme"]
    sender, bob = acme.persona("sender"), acme.persona("bob")
    conversation = api_ok(acme.node, "POST", "conversations", sender.token(),
                          json={"kind": "group", "member_user_ids": [bob.user_id]})["conversation_id"]
    watcher, s = await acme.persona("carol").connect(), await sender.connect()
    stalled = await PingSocket.open(deployment.node.port, rcvbuf=4096)
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

