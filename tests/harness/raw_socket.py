"""A WebSocket client on a plain non-blocking socket, for tests that must know what one client
write carries and what one client read gets (tests/gateway/test_held_replies*.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
from typing import Any

from tests.core.credential_helpers import WAIT_S

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

    async def read_texts(self, count: int) -> list[dict[str, Any]]:
        """The next `count` text frames, over as many reads as they take."""
        data = b""
        while True:
            data += await self.read_once()
            try:
                frames = texts(frames_in(data))
            except AssertionError:  # a frame cut across reads: read on
                continue
            if len(frames) >= count:
                return frames

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


def texts(frames: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    assert all(opcode == OPCODE_TEXT for opcode, _ in frames), frames
    return [json.loads(payload) for _, payload in frames]
