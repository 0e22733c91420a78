"""autobahn pretty-prints its whole configuration for a debug line on every WebSocket it
accepts, whether debug logging is on or not: pure-Python pprint, about 3 % of a node's time
in a reconnect storm (docs/performance.md, "Issue 22: reconnect storms"). Its module's
pformat becomes repr: the same content, one line, formatted in C."""

from __future__ import annotations

from typing import Any


def _repr(obj: Any, *args: Any, **kwargs: Any) -> str:
    return repr(obj)


def install() -> None:
    """Once, at start-up, before the first socket (qim/asgi.py)."""
    import autobahn.websocket.protocol as protocol

    protocol.pformat = _repr  # type: ignore[attr-defined]
