"""Run an ASGI app (a push provider's stand-in) on 127.0.0.1 in a background thread.

Hypercorn serves it: HTTP/1.1 and HTTP/2 (over TLS by ALPN, as APNs requires, or h2c with
prior knowledge over plain TCP), so a stand-in speaks the same wire protocol as the provider.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hypercorn.asyncio import serve
from hypercorn.config import Config

from tests.harness.services import free_port
from tests.harness.tls import TlsFiles


@contextmanager
def serving(app, tls: TlsFiles | None = None) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Serve `app` until the block ends; yields its base URL (https:// when `tls` is given)."""
    port = free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    if tls is not None:
        config.certfile, config.keyfile = str(tls.cert), str(tls.key)
        config.alpn_protocols = ["h2", "http/1.1"]
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        task = asyncio.ensure_future(serve(app, config, shutdown_trigger=stop.wait))
        started.set()
        await task

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(10)
    _wait_listening(port)
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(stop.set)  # type: ignore[union-attr]
        thread.join(10)
        if thread.is_alive():  # a client still holds a connection open: stop the loop itself
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        if not loop.is_running():
            loop.close()


def _wait_listening(port: int, timeout_s: float = 10.0) -> None:
    import socket
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
