"""The opening handshake's HTTP response written with one `send()`, not through Twisted's buffer.

autobahn writes its 101 (or a refusal: 403, 400, 426) with `transport.write`, which arms an
asyncio writer (`loop.add_writer`, an epoll_ctl) that the next loop iteration's `doWrite`
sends from and disarms again (another epoll_ctl): per reconnect, two system calls and a loop
iteration more than the one `send()` needed (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths"). While autobahn is CONNECTING, its other
writes being plain, this sends the response as qim/server/wire.py sends frames: straight to the
kernel when Twisted holds nothing for the socket, the rest behind what Twisted holds, so the
byte stream keeps its order whichever path wrote it. Anything else (TLS, another transport, a
sync or chopped send, autobahn's own queue in use, Twisted closing the socket) takes autobahn's
path. Once OPEN, the same hook first writes what a consumer holds for the socket, so autobahn's own
writes (a close, a Pong) come after it (qim/server/wire.py `release_held`)."""

from __future__ import annotations

from typing import Any

from autobahn.websocket.protocol import WebSocketProtocol

from qim.server.patching import patch_once
from qim.server.wire import HOLDING, plain_tcp, release_held, send_or_queue, takes_writes, twisted_buffered

CONNECTING = WebSocketProtocol.STATE_CONNECTING


def direct(protocol: Any, data: bytes, sync: bool, chopsize: int | None) -> bool:
    """Send `data` for a CONNECTING protocol over plain TCP; False when autobahn must."""
    transport = protocol.transport
    if (
        protocol.state != CONNECTING
        or sync
        or chopsize
        or len(protocol.send_queue)
        or not plain_tcp(transport)
        or not takes_writes(transport)
    ):
        return False
    send_or_queue(transport, data, twisted_buffered(transport))
    # What autobahn's sendData counts and logs for a write while CONNECTING.
    protocol.trafficStats.preopenOutgoingOctetsWireLevel += len(data)
    if protocol.logOctets:
        protocol.logTxOctets(data, False)
    return True


def install() -> bool:
    """Once, at start-up, on daphne's WebSocket protocol (qim/asgi.py); answers whether it did."""
    from daphne.ws_protocol import WebSocketProtocol as DaphneWebSocketProtocol

    send_data = DaphneWebSocketProtocol.sendData

    def sendData(self: Any, data: bytes, sync: bool = False, chopsize: int | None = None) -> None:
        if HOLDING:
            release_held(self)
        if not direct(self, data, sync, chopsize):
            send_data(self, data, sync, chopsize)

    sendData.__doc__ = send_data.__doc__
    return patch_once(DaphneWebSocketProtocol, "qim_handshake_direct", sendData=sendData)
