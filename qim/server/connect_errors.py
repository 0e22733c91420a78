"""An error while daphne builds a WebSocket's scope answers a bare HTTP status, never its text.

autobahn answers an exception raised in `onConnect` with `500 Internal server error: <the
exception's text>` in the status line. The exceptions daphne can meet there come from the
request's own bytes (a header value outside Latin-1, a non-ASCII subprotocol: a 400) or from
the application's construction (a 500): the client learns the status, the log gets the
traceback (daphne logs it before re-raising), and nothing of the server's internals leaves.
"""

from __future__ import annotations

from typing import Any

from autobahn.websocket.types import ConnectionDeny

from qim.server.patching import patch_once


def refusal(exc: Exception) -> ConnectionDeny:
    """The handshake's answer to `exc`: 400 for bytes the client sent that daphne cannot
    decode, 500 for anything else; the reason is the status's standard phrase."""
    if isinstance(exc, ConnectionDeny):
        return exc
    if isinstance(exc, UnicodeError):
        return ConnectionDeny(ConnectionDeny.BAD_REQUEST, "Bad Request")
    return ConnectionDeny(ConnectionDeny.INTERNAL_SERVER_ERROR, "Internal Server Error")


def install() -> bool:
    """Once, at start-up, on daphne's WebSocket protocol (qim/server/tuning.py); whether it did."""
    from daphne.ws_protocol import WebSocketProtocol

    on_connect = WebSocketProtocol.onConnect

    def onConnect(self: Any, request: Any) -> Any:
        try:
            return on_connect(self, request)
        except Exception as exc:
            raise refusal(exc) from exc

    onConnect.__doc__ = on_connect.__doc__
    return patch_once(WebSocketProtocol, "qim_connect_errors", onConnect=onConnect)
