"""A TCP proxy between one WebSocket client and a node that records, per socket, the frames the
client wrote before the server's first frame (AUTH_OK or the refusal): what shows a client
pipelined its requests behind AUTH instead of waiting. It can also hold new sockets (a network
that is down) and cut the open ones without a close frame (a dead network)."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

HEADERS_END = b"\r\n\r\n"


@dataclass
class ProxiedSocket:
    """One client socket: `early` holds the type of each text frame the client wrote before
    the server's first frame (None for a frame whose payload could not be read as JSON)."""

    early: list[str | None] = field(default_factory=list)
    later: int = 0
    server_spoke: bool = False
    # Called with each frame recorded in `early` (the proxy's `cut_when_early`).
    on_early: Callable[[ProxiedSocket], None] | None = field(default=None, repr=False)
    _client_bytes: bytearray = field(default_factory=bytearray, repr=False)  # holds the token
    _client_upgraded: bool = field(default=False, repr=False)
    _server_bytes: bytearray = field(default_factory=bytearray, repr=False)

    def from_client(self, data: bytes) -> None:
        self._client_bytes += data
        if not self._client_upgraded:
            end = self._client_bytes.find(HEADERS_END)
            if end < 0:
                return
            del self._client_bytes[: end + len(HEADERS_END)]
            self._client_upgraded = True
        while (frame := _take_frame(self._client_bytes)) is not None:
            if self.server_spoke:
                self.later += 1
            else:
                self.early.append(frame)
                if self.on_early is not None:
                    self.on_early(self)

    def from_server(self, data: bytes) -> None:
        if self.server_spoke:
            return
        self._server_bytes += data
        end = self._server_bytes.find(HEADERS_END)
        if end >= 0 and len(self._server_bytes) > end + len(HEADERS_END):
            self.server_spoke = True  # a byte past the 101 response: the answer to AUTH


def _take_frame(buffer: bytearray) -> str | None:
    """Remove one whole client frame from `buffer`; its JSON `type` ("" for a non-text frame)."""
    if len(buffer) < 2:
        return None
    first, second = buffer[0], buffer[1]
    length, offset = second & 0x7F, 2
    if length == 126:
        if len(buffer) < 4:
            return None
        length, offset = struct.unpack("!H", buffer[2:4])[0], 4
    elif length == 127:
        if len(buffer) < 10:
            return None
        length, offset = struct.unpack("!Q", buffer[2:10])[0], 10
    mask = b""
    if second & 0x80:
        mask, offset = bytes(buffer[offset : offset + 4]), offset + 4
    if len(buffer) < offset + length:
        return None
    payload = bytes(buffer[offset : offset + length])
    del buffer[: offset + length]
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    if first & 0x0F != 1 or first & 0x40:  # not text, or compressed: counted, not read
        return ""
    try:
        return str(json.loads(payload).get("type"))
    except ValueError:
        return ""


class FrameProxy:
    """Listens on a free local port and forwards each socket to `ws_url`'s host and port."""

    def __init__(self, ws_url: str) -> None:
        parts = urlsplit(ws_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.path = parts.path
        self.sockets: list[ProxiedSocket] = []
        # Cleared: new sockets wait (the client sees its handshake stall) until it is set.
        self.open = asyncio.Event()
        self.open.set()
        # Set: the next socket whose client writes this many frames before the server's first
        # is cut with every other one at that moment (a network dying mid-reconnect); once.
        self.cut_when_early: int | None = None
        self._transports: list[asyncio.WriteTransport] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}{self.path}"

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()

    def cut(self) -> None:
        """Abort every open socket both ways: no close frame, as when a network dies."""
        for transport in self._transports:
            transport.abort()
        self._transports.clear()

    def _early_written(self, socket: ProxiedSocket) -> None:
        if self.cut_when_early is not None and len(socket.early) >= self.cut_when_early:
            self.cut_when_early = None
            self.cut()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        await self.open.wait()
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.transport.abort()
            return
        socket = ProxiedSocket(on_early=self._early_written)
        self.sockets.append(socket)
        self._transports += [client_writer.transport, server_writer.transport]
        await asyncio.gather(
            _pump(client_reader, server_writer, socket.from_client),
            _pump(server_reader, client_writer, socket.from_server),
        )


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, note: object) -> None:
    try:
        while data := await reader.read(65536):
            note(data)  # type: ignore[operator]
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.transport.abort()
