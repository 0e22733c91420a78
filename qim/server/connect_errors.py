"""A WebSocket handshake that daphne cannot turn into a scope answers a bare HTTP status,
never the text of an exception.

autobahn answers an exception raised in `onConnect` with `500 Internal server error: <the
exception's text>` in the status line, and daphne logs it as a crash. The request's own bytes
can raise there: daphne re-encodes every header value as Latin-1 and decodes the offered
subprotocols and the path as ASCII. Such a request is the client's error: it is refused with
`400 Bad Request` before daphne builds anything. Any other exception is a bug: daphne logs its
traceback, and the client gets `500 Internal Server Error`, without the text.
"""

from __future__ import annotations

from typing import Any

from autobahn.websocket.types import ConnectionDeny

from qim.server.patching import patch_once

BAD_REQUEST = ConnectionDeny(ConnectionDeny.BAD_REQUEST, "Bad Request")


def undecodable(request: Any) -> bool:
    """Whether daphne's onConnect would fail to encode or decode this upgrade request."""
    try:
        for name, value in request.headers.items():
            name.encode("ascii")
            raw = value.encode("latin1")
            if name.lower() == "sec-websocket-protocol":
                raw.decode("ascii")
        request.path.encode("ascii")
    except UnicodeError:
        return True
    return False


def refusal(exc: Exception) -> ConnectionDeny:
    """The handshake's answer to an exception raised while the scope was built."""
    if isinstance(exc, ConnectionDeny):
        return exc
    if isinstance(exc, UnicodeError):
        return BAD_REQUEST
    return ConnectionDeny(ConnectionDeny.INTERNAL_SERVER_ERROR, "Internal Server Error")


def install() -> bool:
    """Once, at start-up, on daphne's WebSocket protocol (qim/server/tuning.py); whether it did."""
    from daphne.ws_protocol import WebSocketProtocol

    on_connect = WebSocketProtocol.onConnect

    def onConnect(self: Any, request: Any) -> Any:
        if undecodable(request):
            # What daphne's onConnect does first: its close handling expects the protocol known.
            self.server = self.factory.server_class
            self.server.protocol_connected(self)
            raise BAD_REQUEST
        try:
            return on_connect(self, request)
        except Exception as exc:
            raise refusal(exc) from exc

    onConnect.__doc__ = on_connect.__doc__
    return patch_once(WebSocketProtocol, "qim_connect_errors", onConnect=onConnect)
