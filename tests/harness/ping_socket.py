"""A WebSocket client by hand for keepalive tests: it sees every control frame the server
sends, answers pings only while told to, and can open with a tiny receive buffer and stop
reading (a peer whose window closes)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct

PING, PONG, TEXT, CLOSE = 0x9, 0xA, 0x1, 0x8


class PingSocket:
    """A WebSocket client by hand that sees every control frame the server sends and answers
    pings only while `answering` is set."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.answering = True
        self.pings = 0
        self.pongs: list[bytes] = []

    @classmethod
    async def open(cls, port: int, rcvbuf: int = 0, headers: dict[str, str] | None = None) -> "PingSocket":
        """Connected and upgraded; `rcvbuf` > 0 sets SO_RCVBUF before connecting (so the
        window the kernel advertises is that small); `headers` go into the upgrade request."""
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        writer.write(
            f"GET /ws/v1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n".encode()
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
        if opcode == PONG:
            self.pongs.append(payload)
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

    async def assert_served(self) -> None:
        """The session still answers: a CONVERSATIONS request gets its list."""
        self.send({"type": "CONVERSATIONS", "req_id": "served"})
        reply = await self.text()
        assert (reply["type"], reply["req_id"]) == ("CONVERSATION_LIST", "served")

    def stop_reading(self) -> None:
        """Read nothing more from the socket: its receive window fills and stays at zero."""
        self.writer.transport.pause_reading()

    def close(self) -> None:
        self.writer.close()
