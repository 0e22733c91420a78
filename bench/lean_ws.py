"""A lean WebSocket client for load generation: asyncio.Protocol, RFC 6455 framing by hand.

Receivers in the benchmarks hold hundreds of sockets per process and must not be the bottleneck:
no compression offered, no per-frame task or queue, no UTF-8 decoding of what is received
(handlers get the raw payload bytes). Server frames are unmasked and read straight from one
buffer; client frames (AUTH, JOIN, SEND: rare) are masked as the RFC requires. Pings are
answered, fragmented messages are joined. It speaks to any server (daphne, websockets).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Callable

TextHandler = Callable[[bytes], None]

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def _mask(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    if n == 0:
        return payload
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One masked, final client frame."""
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 65536:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    key = os.urandom(4)
    return head + key + _mask(payload, key)


class LeanWebSocket(asyncio.Protocol):
    """One client connection. `on_text(payload_bytes)` is called for every text message;
    until it is set, messages queue for `recv()` (the set-up exchange: AUTH, JOIN)."""

    def __init__(self, host: str, path: str) -> None:
        self.host, self.path = host, path
        self.transport: asyncio.Transport | None = None
        self.on_text: TextHandler | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._handshake_done = False
        self._buf = bytearray()
        self._fragments: list[bytes] = []
        self._fragment_op = 0
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.frames_received = 0

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.transport.write(request.encode())

    def data_received(self, data: bytes) -> None:
        if not self._buf and self.on_text is not None and self._one_text_frame(data):
            return
        buf = self._buf
        buf += data
        if not self._handshake_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(buf[: buf.find(b"\r\n")])
            del buf[: end + 4]
            if b" 101 " not in status + b" ":
                if not self.opened.done():
                    self.opened.set_exception(ConnectionError(status.decode(errors="replace")))
                self.transport.close()  # type: ignore[union-attr]
                return
            self._handshake_done = True
            self.opened.set_result(None)
        self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed during the handshake"))
        if not self.closed.done():
            self.closed.set_result(None)

    # --- framing ---------------------------------------------------------------------

    def _one_text_frame(self, data: bytes) -> bool:
        """The usual read of a live receiver: exactly one whole, final, unmasked text frame,
        handed over without the buffer's append, copy and trim (issue 22: 10 000 receivers
        share the 2 cores with the nodes they measure). False, having done nothing, for
        anything else (several frames, a partial one, control frames), which `_parse` reads."""
        size = len(data)
        if size < 2 or data[0] != 0x81 or data[1] & 0x80 or self._fragments or not self._handshake_done:
            return False
        length, head = data[1], 2
        if length == 126:
            length, head = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, head = int.from_bytes(data[2:10], "big"), 10
        if head + length != size:
            return False
        self._fragment_op = OP_TEXT
        self.frames_received += 1
        self.on_text(data[head:])  # type: ignore[misc]
        return True

    def _parse(self) -> None:
        buf = self._buf
        pos, size = 0, len(buf)
        while size - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                if size - pos < 4:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 4], "big")
                head = 4
            elif length == 127:
                if size - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
            if size - pos < head + length:
                break
            payload = bytes(buf[pos + head : pos + head + length])
            pos += head + length
            self._frame(b0 & 0x80, b0 & 0x0F, payload)
        if pos:
            del buf[:pos]

    def _frame(self, fin: int, opcode: int, payload: bytes) -> None:
        if opcode == OP_PING:
            self._write(OP_PONG, payload)
            return
        if opcode == OP_CLOSE:
            self._write(OP_CLOSE, payload[:2])
            self.transport.close()  # type: ignore[union-attr]
            return
        if opcode == OP_PONG:
            return
        if opcode != OP_CONT:
            self._fragment_op = opcode
        if not fin:
            self._fragments.append(payload)
            return
        if self._fragments:
            self._fragments.append(payload)
            payload = b"".join(self._fragments)
            self._fragments = []
        if self._fragment_op != OP_TEXT:
            return
        self.frames_received += 1
        if self.on_text is not None:
            self.on_text(payload)
        else:
            self._inbox.put_nowait(payload)

    def _write(self, opcode: int, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(opcode, payload))

    # --- the API ---------------------------------------------------------------------

    def send_text(self, text: str | bytes) -> None:
        self._write(OP_TEXT, text.encode() if isinstance(text, str) else text)

    def send_texts(self, texts: list[str]) -> None:
        """Several text frames in one write (a reconnect's AUTH, SYNC and ROOM_JOIN)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(encode_frame(OP_TEXT, text.encode()) for text in texts))

    async def recv(self, timeout: float = 30.0) -> bytes:
        """The next text message (only while `on_text` is unset); one already here is taken
        without wait_for's task."""
        if not self._inbox.empty():
            return self._inbox.get_nowait()
        return await asyncio.wait_for(self._inbox.get(), timeout)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def connect(host: str, port: int, path: str, timeout: float = 60.0) -> LeanWebSocket:
    loop = asyncio.get_running_loop()
    _, protocol = await asyncio.wait_for(
        loop.create_connection(lambda: LeanWebSocket(f"{host}:{port}", path), host, port), timeout
    )
    await asyncio.wait_for(protocol.opened, timeout)
    return protocol  # type: ignore[return-value]


def run_receivers(main) -> None:  # type: ignore[no-untyped-def]
    """Run a receiver process's loop on uvloop (bench only, requirements.txt): its read path
    is C, so the receivers, which share the 2 cores with the server they measure, take less
    of them (issue 22: 5 000 receivers used a core and more). Every server of a run gets
    the same receivers."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)
