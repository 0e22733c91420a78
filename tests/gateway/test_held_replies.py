"""The replies to frames that arrive in one read are written with one `send()` once the last is
served (qim/gateway/wire.py `hold`/`release`, qim/gateway/consumer.py `_dispatch_held`), on a
real daphne node over a raw socket, so that what one write of the client carries and what one
read of the client gets are both known: every reply comes, in order, in one read; errors
among the frames keep their places; a refused AUTH's ERROR still precedes the close 4401,
which autobahn writes after releasing what was held."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import QimDeployment
from tests.core.credential_helpers import WAIT_S
from tests.harness.batches import counter
from tests.harness.personas import TenantHandle, api_ok

OPCODE_TEXT, OPCODE_CLOSE, OPCODE_PONG = 0x1, 0x8, 0xA


def masked(payload: bytes, opcode: int = OPCODE_TEXT) -> bytes:
    """One client frame (RFC 6455 §5.2: clients mask), final, up to 64 KiB."""
    mask = os.urandom(4)
    size = len(payload)
    head = struct.pack("!BB", 0x80 | opcode, 0x80 | size) if size <= 125 else struct.pack("!BBH", 0x80 | opcode, 0xFE, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def frames_in(data: bytes) -> list[tuple[int, bytes]]:
    """The whole server frames (unmasked) in `data`, as (opcode, payload); a cut frame fails."""
    out: list[tuple[int, bytes]] = []
    at = 0
    while at < len(data):
        opcode, size = data[at] & 0x0F, data[at + 1] & 0x7F
        at += 2
        if size == 126:
            (size,) = struct.unpack_from("!H", data, at)
            at += 2
        elif size == 127:
            (size,) = struct.unpack_from("!Q", data, at)
            at += 8
        assert at + size <= len(data), "a frame cut across reads"
        out.append((opcode, data[at:at + size]))
        at += size
    return out


class RawSocket:
    """A WebSocket client on a plain non-blocking socket: one `write` is one `send()`, and
    `read_once` is one `recv()` of whatever the kernel holds when the socket is readable."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()

    @classmethod
    async def open(cls, port: int) -> "RawSocket":
        sock = socket.socket()
        sock.setblocking(False)
        raw = cls(sock)
        await raw.loop.sock_connect(sock, ("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        await raw.write((f"GET /ws/v1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                         f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += await raw.read_once()
        assert head.startswith(b"HTTP/1.1 101 ") and head.endswith(b"\r\n\r\n"), head
        return raw

    async def write(self, data: bytes) -> None:
        await self.loop.sock_sendall(self.sock, data)

    async def send_frames(self, *frames: dict[str, Any] | bytes) -> None:
        """All of them in one write (bytes: a text payload sent as it is)."""
        await self.write(b"".join(masked(f if isinstance(f, bytes) else json.dumps(f).encode()) for f in frames))

    async def read_once(self) -> bytes:
        data = await asyncio.wait_for(self.loop.sock_recv(self.sock, 1 << 20), WAIT_S)
        assert data, "the node closed the socket"
        return data

    async def read_through_close(self) -> list[tuple[int, bytes]]:
        """Every frame up to and including the server's close frame."""
        data = await self.read_once()
        while True:
            try:
                frames = frames_in(data)
            except AssertionError:  # the close's two sends may be read apart, or cut
                frames = []
            if any(opcode == OPCODE_CLOSE for opcode, _ in frames):
                return frames
            data += await self.read_once()


@pytest.fixture
async def raw(embedded: QimDeployment) -> AsyncIterator[RawSocket]:
    sock = await RawSocket.open(embedded.nodes[0].port)
    yield sock
    sock.sock.close()


def texts(frames: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    assert all(opcode == OPCODE_TEXT for opcode, _ in frames), frames
    return [json.loads(payload) for _, payload in frames]


def held_count(tenant: TenantHandle) -> int:
    return counter(tenant.node, tenant, "frames_written_held")


async def test_a_pipelined_reconnect_gets_every_reply_in_order_in_one_read(embedded: QimDeployment, raw: RawSocket) -> None:
    acme = embedded.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = f"held-{secrets.token_hex(4)}"
    api_ok(acme.node, "POST", "rooms", alice.token(), json={"room_id": room})
    held = held_count(acme)
    await raw.send_frames({"type": "AUTH", "req_id": "a", "token": bob.token(), "device_id": "phone"},
                          {"type": "SYNC", "req_id": "s", "after_mailbox_seq": 0},
                          {"type": "ROOM_JOIN", "req_id": "j", "room_id": room, "after_room_seq": 0},
                          {"type": "PING", "req_id": "p"})
    replies = texts(frames_in(await raw.read_once()))
    assert [(r["type"], r["req_id"]) for r in replies] == [
        ("AUTH_OK", "a"), ("SYNC_BATCH", "s"), ("ROOM_BATCH", "j"), ("PONG", "p")], replies
    assert replies[0]["user_id"] == bob.user_id
    assert replies[1]["has_more"] is False and replies[2]["events"] == [], replies  # contents: test_pipelined_reconnect
    assert held_count(acme) - held == 4
    # A frame read alone afterwards is written at once, not held.
    await raw.send_frames({"type": "PING", "req_id": "q"})
    assert [(r["type"], r["req_id"]) for r in texts(frames_in(await raw.read_once()))] == [("PONG", "q")]
    assert held_count(acme) - held == 4


async def test_errors_among_frames_read_at_once_keep_their_places(embedded: QimDeployment, raw: RawSocket) -> None:
    acme = embedded.tenants["acme"]
    carol = acme.persona("carol")
    await raw.send_frames({"type": "AUTH", "req_id": "a", "token": carol.token(), "device_id": "phone"},
                          b"not json", {"type": "NO_SUCH_TYPE", "req_id": "u"},
                          {"type": "ROOM_JOIN", "req_id": "j", "room_id": "no-such-room"},
                          {"type": "PING", "req_id": "p"})
    replies = texts(frames_in(await raw.read_once()))
    assert [(r["type"], r.get("code"), r.get("req_id")) for r in replies] == [
        ("AUTH_OK", None, "a"), ("ERROR", "bad_frame", None), ("ERROR", "unknown_type", "u"),
        ("ERROR", "not_found", "j"), ("PONG", None, "p")], replies


async def test_a_refused_auth_read_with_frames_behind_it_gets_its_error_then_the_close(raw: RawSocket) -> None:
    await raw.send_frames({"type": "AUTH", "req_id": "a", "token": secrets.token_urlsafe(32), "device_id": "phone"},
                          {"type": "SYNC", "req_id": "s", "after_mailbox_seq": 0},
                          {"type": "PING", "req_id": "p"})
    frames = await raw.read_through_close()
    assert [opcode for opcode, _ in frames] == [OPCODE_TEXT, OPCODE_CLOSE], frames
    error = json.loads(frames[0][1])
    assert (error["type"], error["code"], error["req_id"]) == ("ERROR", "unauthenticated", "a")
    assert struct.unpack("!H", frames[1][1][:2])[0] == 4401
