"""The keepalive over a real daphne, with daphne's per-connection timers replaced by the due
ones (qim/gateway/daphne_timers.py): an idle socket is pinged every QIM_WS_PING_INTERVAL_S and
stays open while it answers; one that stops answering is closed after daphne's --ping-timeout
and its user is seen offline; a closed socket's application is reaped."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, TENANT_NAMES
from tests.harness.qim_process import QimNode, sqlite_database

PING, PONG, TEXT, CLOSE = 0x9, 0xA, 0x1, 0x8


class PingSocket:
    """A WebSocket client by hand that sees every control frame the server sends and answers
    pings only while `answering` is set."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.answering = True
        self.pings = 0

    @classmethod
    async def open(cls, port: int) -> "PingSocket":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET /ws/v1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    def _write(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        assert len(payload) <= 125
        self.writer.write(struct.pack("!BB", 0x80 | opcode, 0x80 | len(payload)) + mask
                          + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, frame: dict) -> None:
        self._write(TEXT, json.dumps(frame).encode())

    async def next_frame(self, timeout: float) -> tuple[int, bytes]:
        """(opcode, payload) of the next frame; (CLOSE, b"") when the connection ended."""
        try:
            b0, b1 = await asyncio.wait_for(self.reader.readexactly(2), timeout)
            size = b1 & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", await self.reader.readexactly(8))
            payload = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        except (asyncio.IncompleteReadError, ConnectionError):
            return CLOSE, b""
        opcode = b0 & 0x0F
        if opcode == PING:
            self.pings += 1
            if self.answering:
                self._write(PONG, payload)
        return opcode, payload

    async def text(self, timeout: float = 30.0) -> dict:
        """The next text frame, answering (or ignoring) pings on the way."""
        while True:
            opcode, payload = await self.next_frame(timeout)
            assert opcode != CLOSE, "the server closed the connection"
            if opcode == TEXT:
                return json.loads(payload)

    async def authenticate(self, token: str) -> None:
        self.send({"type": "AUTH", "req_id": "a", "token": token, "device_id": "phone"})
        assert (await self.text())["type"] == "AUTH_OK"

    def close(self) -> None:
        self.writer.close()


@pytest.fixture(scope="module")
def keepalive(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One embedded node pinging idle sockets every second, closing them 2 s after an
    unanswered ping."""
    db = sqlite_database(sqlite_template, work_dir, "keepalive")
    env = {**db.env, "QIM_VAR_DIR": str(work_dir), "QIM_WS_PING_INTERVAL_S": "1"}
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
        sock.send({"type": "CONVERSATIONS", "req_id": "c"})
        reply = await sock.text()
        assert (reply["type"], reply["req_id"]) == ("CONVERSATION_LIST", "c")
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
