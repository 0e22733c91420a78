"""Autobahn's protocol options read from a class, not copied into every socket.

autobahn's `_connectionMade` copies each of its 29 protocol options from the factory into the
new protocol's `__dict__`, unless the protocol already has the attribute. With daphne's ~80
attributes of its own, that pushed every socket's dict past 85 keys into the next dict size:
3.3 KiB instead of 1.6 (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths").
The options are the same for every socket of a factory, so each daphne factory builds its
sockets from a subclass of daphne's protocol whose class attributes are the factory's option
values: `hasattr` is true, nothing is copied, and every read finds the value it found before. A later
`setProtocolOptions` or `resetProtocolOptions` on the factory builds a new subclass, so new
sockets see the change exactly as they did when the values were copied at connect; a value
set on one protocol still wins over the class, as autobahn intends. With every option on the
class, its `CONFIG_ATTRS` is empty: the copying loop, which also listed all 29 options with their
values for a debug line nobody writes, has nothing left to do.

The handshake-only attributes (`HANDSHAKE_ONLY`) default to None on that class, so the
handshake's leftovers can be deleted from the instance after accept (qim/server/handshake.py)
and still read as None."""

from __future__ import annotations

from collections import deque
from typing import Any

# Autobahn's handshake state: parsed and used while the opening handshake is processed only.
HANDSHAKE_ONLY = ("http_headers", "http_request_data", "http_request_params", "http_response_data")


class SendQueue:
    """autobahn's `send_queue` for an open socket: a deque made on the first append. Autobahn
    queues only sync or chopped sends (none of QIM's); otherwise it only asks its length, and
    an empty deque is 760 bytes per socket. Holds everything autobahn's deque did, in order."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[Any] | None = None

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else 0

    def append(self, item: Any) -> None:
        if self._items is None:
            self._items = deque()
        self._items.append(item)

    def popleft(self) -> Any:
        if self._items is None:
            raise IndexError("pop from an empty deque")
        return self._items.popleft()


def options_class(factory: Any) -> type:
    """A subclass of the factory's protocol class holding the factory's current options."""
    base = getattr(factory.protocol, "options_base", factory.protocol)
    options = {name: as_class_value(getattr(factory, name)) for name in base.CONFIG_ATTRS if hasattr(factory, name)}
    namespace = {**dict.fromkeys(HANDSHAKE_ONLY), **options, "options_base": base,
                 "__module__": base.__module__, "__qualname__": base.__qualname__}
    if len(options) == len(base.CONFIG_ATTRS):
        # Every option is on the class: autobahn's `_connectionMade` has none to copy, and its
        # loop over them would only build a debug line's list of 29 tuples that is never written.
        namespace["CONFIG_ATTRS"] = ()
    return type(base.__name__, (base,), namespace)


def as_class_value(value: Any) -> Any:
    """What a class attribute must hold for an instance to read `value` itself: a function (the
    `perMessageCompressionAccept` callback) would otherwise be bound to the protocol."""
    return staticmethod(value) if hasattr(type(value), "__get__") else value


def _rebuilding(method: Any) -> Any:
    def options_changed(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        self.protocol = options_class(self)
        return result

    options_changed.__name__ = method.__name__
    options_changed.__doc__ = method.__doc__
    return options_changed


def install() -> None:
    """Once, at start-up, before daphne builds its WebSocket factory (qim/asgi.py)."""
    from daphne.ws_protocol import WebSocketFactory

    if getattr(WebSocketFactory, "qim_options_from_class", False):
        return
    for name in ("resetProtocolOptions", "setProtocolOptions"):
        setattr(WebSocketFactory, name, _rebuilding(getattr(WebSocketFactory, name)))
    WebSocketFactory.qim_options_from_class = True
