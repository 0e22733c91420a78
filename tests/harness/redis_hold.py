"""A TCP proxy in front of a real redis-server that holds one kind of command on request: a
Redis slow for exactly the calls a fault scenario is about, fast for the rest (toxiproxy's
idea, with a toxic that reads the command). It runs on its own thread and loop, so the test's
blocking HTTP calls never stall the Redis traffic of the nodes they are waiting for."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class RedisHoldProxy:
    """Forwards every byte both ways; while held, a client's request that `matches` waits
    (and everything behind it on that connection) until `release()`."""

    def __init__(self, upstream_host: str, upstream_port: int, matches: Callable[[bytes], bool]) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.matches = matches
        self.host = "127.0.0.1"
        self.port = 0
        self.waiting = 0  # requests held right now
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="redis-hold-proxy", daemon=True)
        self._open: asyncio.Event | None = None
        self._server: asyncio.AbstractServer | None = None

    def start(self) -> "RedisHoldProxy":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=30)
        return self

    def hold(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)  # type: ignore[union-attr]

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)  # type: ignore[union-attr]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        self._open.set()  # type: ignore[union-attr]
        self._server.close()  # type: ignore[union-attr]

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer, inspect=True),
            self._pipe(upstream_reader, client_writer, inspect=False),
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, inspect: bool) -> None:
        tail = b""  # a command split across two reads still matches
        try:
            while data := await reader.read(65536):
                if inspect and not self._open.is_set() and self.matches(tail + data):  # type: ignore[union-attr]
                    self.waiting += 1
                    await self._open.wait()  # type: ignore[union-attr]
                    self.waiting -= 1
                tail = data[-128:]
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
