"""What the WebSocket upgrade handshake costs beyond the handshake itself, cut.

* autobahn pretty-prints its whole configuration for a debug line on every WebSocket it
  accepts, and names its methods in colour for others, whether debug logging is on or not:
  pure-Python pprint, about 3 % of a node's time in a reconnect storm, then 2 % as a repr,
  and 2 % more for the colours (docs/performance.md,
  "Lean handshake, upgrade, frame and per-socket paths"). pformat becomes `DeferredText`, a
  repr made only if the line is written (txaio drops debug lines unformatted); hltype and hlval
  give the object itself, shown by its repr if written.
* daphne and autobahn keep the handshake's request, parsed headers and raw bytes on the
  protocol for the socket's whole life, about 2 KiB of an idle connection's memory
  (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths"); nothing reads
  them after the handshake but daphne's access log, which wants the path only (`release_handshake`); the
  empty lists of offered subprotocols and extensions, read only during the handshake, become
  the shared empty tuple.
* Twisted's HTTP channel that carried the upgrade request stays the TCP transport's
  registered producer, and with it the upgraded `Request`, its `Headers` and body buffer
  (about 1.5 KiB). After the upgrade that producer does nothing: its request never finishes
  (`_handlingRequest` stays true) and it has no producer of its own, so its pause and resume
  change no state anything reads. It is unregistered (`release_upgraded_request`).
* autobahn's empty send deque (760 bytes) becomes a `SendQueue` that makes one when used."""

from __future__ import annotations

from typing import Any

from qim.server.lean_protocol import HANDSHAKE_ONLY, SendQueue
from qim.server.tuning import STATE as TUNING


class DeferredText:
    """A log argument formatted when the line is written: txaio drops debug lines unformatted."""

    __slots__ = ("format", "args")

    def __init__(self, format: Any, *args: Any) -> None:
        self.format = format
        self.args = args

    def __str__(self) -> str:
        return str(self.format(*self.args))

    def __repr__(self) -> str:
        return str(self)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _deferred_repr(obj: Any, *args: Any, **kwargs: Any) -> DeferredText:
    return DeferredText(repr, obj)


def _plain(obj: Any, color: Any = None, bold: Any = None) -> Any:
    """hltype and hlval's stand-in: the object itself, which a written line shows by its repr,
    uncoloured. Called per received packet, so it allocates nothing."""
    return obj


def install() -> None:
    """Once, at start-up, before the first socket (qim/asgi.py). autobahn calls pformat,
    hltype and hlval only for log arguments but for `Timings.__str__`, which gets repr."""
    import autobahn.twisted.websocket as twisted_websocket
    import autobahn.websocket.protocol as protocol

    protocol.Timings.__str__ = lambda timings: repr(timings._timings)  # type: ignore[method-assign]
    protocol.pformat = _deferred_repr  # type: ignore[attr-defined]
    for module in (protocol, twisted_websocket):
        module.hltype = module.hlval = _plain  # type: ignore[attr-defined]


# autobahn's lists of the offered subprotocols and extensions and of the extensions in use,
# read only while the handshake is processed; empty ones become the shared empty tuple.
HANDSHAKE_LISTS = ("websocket_protocols", "websocket_extensions", "websocket_extensions_in_use")


class RequestPath:
    """What daphne's access log reads of `protocol.request` after the handshake."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


def release_handshake(send: Any, scope: dict[str, Any]) -> bool:
    """Drop the handshake's leftovers from daphne's protocol under `send` (its ASGI send is
    `partial(server.handle_reply, protocol)`) and the headers from the scope, which daphne's
    protocol and every router's copy of the scope share. Whether there was a protocol."""
    if "handshake_release" not in TUNING.enabled:
        return False
    protocol = (getattr(send, "args", None) or (None,))[0]
    request = getattr(protocol, "request", None)
    if request is None or not hasattr(request, "path"):
        return False
    protocol.request = RequestPath(request.path)
    for name in HANDSHAKE_ONLY:
        if name in protocol.__dict__:
            if getattr(type(protocol), name, True) is None:
                del protocol.__dict__[name]  # reads None from the class (qim/server/lean_protocol.py)
            else:
                setattr(protocol, name, None)
    release_upgraded_request(getattr(protocol, "transport", None))
    queued = protocol.__dict__.get("send_queue")
    if queued is not None and not queued and not isinstance(queued, SendQueue):
        protocol.send_queue = SendQueue()
    headers = scope.get("headers")
    if isinstance(headers, list):
        headers.clear()  # the same list object daphne's clean_headers and each scope copy hold
        scope["headers"] = protocol.clean_headers = ()
    for name in HANDSHAKE_LISTS:
        if protocol.__dict__.get(name) == []:
            protocol.__dict__[name] = ()
    return True


def release_upgraded_request(transport: Any) -> bool:
    """Unregister the HTTP channel of an upgraded request from its TCP transport, when it is a
    no-op producer as described above; whether it was."""
    from twisted.web.http import HTTPChannel

    channel = getattr(transport, "producer", None)
    if not isinstance(channel, HTTPChannel) or transport.protocol is channel:
        return False
    if not channel._handlingRequest or channel._requestProducer is not None:
        return False
    transport.unregisterProducer()
    return True
