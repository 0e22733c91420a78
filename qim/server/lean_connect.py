"""daphne's WebSocket `onConnect` without the Deferreds around a synchronous call, and its
protocols hashed by identity in C.

daphne builds the connection's ASGI scope, then starts the application through
`maybeDeferred(server.create_application, ...)` with a callback and an errback added to it:
three Deferreds run through for a call that is synchronous under QIM
(qim/server/daphne_checks.py `create_application`), about 3 % of a node's CPU in a reconnect
storm (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths"). This
`onConnect` makes the same scope from the same headers and calls the two directly. What differs
is only what daphne got wrong around them: an application created for a socket that went away meanwhile
(`create_application` answers None) is not handed a `websocket.connect` (daphne raised there
and logged the AttributeError), and an error creating it fails the handshake with a bare 500
(qim/server/connect_errors.py) instead of leaving it to time out. The scope's `client`,
`server` and an empty `subprotocols` are tuples (ASGI asks for iterables), which hold nothing
the collector must keep walking.

daphne's WebSocket protocol and HTTP request define `__hash__` and `__eq__` in Python as
identity (`hash(id(self))`, `id(self) == id(other)`): about ten Python calls per connect for the
dicts and sets that hold them. `object`'s own hash and equality are that same identity, in C.

autobahn's event mixin gives every socket a list of its event names and a dict of each event's
last `fire` result, two objects the collector walks for the socket's life; nothing reads the
results (`fire` writes them only when a listener is registered). The names are one shared tuple
per list here, and the results a shared dict that drops what is written to it.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any
from urllib.parse import unquote

from daphne.utils import parse_x_forwarded_for
from twisted.internet import defer

from qim.server.connect_errors import BAD_REQUEST, refusal, undecodable
from qim.server.patching import patch_once

logger = logging.getLogger("daphne.ws_protocol")


def on_connect(self: Any, request: Any) -> defer.Deferred:
    """daphne 4's `WebSocketProtocol.onConnect`, the application started by a plain call."""
    self.server = self.factory.server_class
    self.server.protocol_connected(self)
    if undecodable(request):
        raise BAD_REQUEST  # the client's bytes, not a bug (qim/server/connect_errors.py)
    self.request, self.protocol_to_accept = request, None
    self.root_path = self.server.root_path
    self.socket_opened = self.last_ping = time.time()
    try:
        self.clean_headers = []
        for name, value in request.headers.items():
            name = name.encode("ascii")
            if b"_" in name:  # CVE-2015-0219
                continue
            if name.lower() == b"daphne-root-path":
                self.root_path = unquote(value)
            else:
                self.clean_headers.append((name.lower(), value.encode("latin1")))
        peer = self.transport.getPeer()
        host = self.transport.getHost()
        if hasattr(peer, "host") and hasattr(peer, "port"):
            # Tuples (daphne: lists): the collector stops tracking a tuple of a str and an int.
            self.client_addr = (str(peer.host), peer.port)
            self.server_addr = (str(host.host), host.port)
        else:
            self.client_addr = None
            self.server_addr = None
        if self.server.proxy_forwarded_address_header:
            self.client_addr, self.client_scheme = parse_x_forwarded_for(
                dict(self.clean_headers),
                self.server.proxy_forwarded_address_header,
                self.server.proxy_forwarded_port_header,
                self.server.proxy_forwarded_proto_header,
                self.client_addr,
            )
        subprotocols: list[str] | tuple[()] = ()
        for header, value in self.clean_headers:
            if header == b"sec-websocket-protocol":
                subprotocols = [x.strip() for x in unquote(value.decode("ascii")).split(",")]
        self.path = request.path.encode("ascii")
        queue = self.server.create_application(self, {
            "type": "websocket",
            "path": unquote(self.path.decode("ascii")),
            "raw_path": self.path,
            "root_path": self.root_path,
            "headers": self.clean_headers,
            "query_string": self._raw_query_string,  # set by the HTTP side (daphne or lean_upgrade)
            "client": self.client_addr,
            "server": self.server_addr,
            "subprotocols": subprotocols,
        })
        if queue is not None:
            self.applicationCreateWorked(queue)
    except Exception as exc:
        logger.error(traceback.format_exc())
        raise refusal(exc) from exc
    # autobahn waits on this until the application accepts or refuses.
    self.handshake_deferred = defer.Deferred()
    return self.handshake_deferred


class DroppedResults(dict):  # type: ignore[type-arg]
    """autobahn's `_results` that no one reads: what `fire` writes is dropped."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


NO_RESULTS = DroppedResults()
_EVENT_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def set_valid_events(self: Any, valid_events: Any = None) -> None:
    """autobahn's `ObservableMixin.set_valid_events`, shared: the names as one tuple per list."""
    names = tuple(valid_events)
    self._valid_events = _EVENT_NAMES.setdefault(names, names)
    self._results = NO_RESULTS


def install() -> bool:
    """Once, at start-up, before daphne accepts a WebSocket (qim/asgi.py); whether it did."""
    from daphne.http_protocol import WebRequest
    from daphne.ws_protocol import WebSocketProtocol

    identity = {"__hash__": object.__hash__, "__eq__": object.__eq__}
    patch_once(WebRequest, "qim_identity_hash", **identity)
    return patch_once(WebSocketProtocol, "qim_lean_connect", onConnect=on_connect,
                      set_valid_events=set_valid_events, **identity)
