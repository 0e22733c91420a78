"""The WebSocket route (/ws/v1 to the gateway consumer) without channels' router layers.

Channels' `OriginValidator` and `URLRouter` each stay a coroutine frame for a socket's whole
life, URLRouter with its own copy of the scope: about 1.4 KiB per idle connection
(docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths"). `WebSocketRoute`
makes the same decisions in a plain call that returns the consumer's coroutine (or the
denier's), so nothing of it stays once the socket is served: the origin check is
`QimOriginValidator.valid_origin` on the same parsed Origin header, the path is matched by the
same Django route pattern after the same `root_path` handling. A path that matches nothing is
refused like a bad origin, HTTP 403 before the socket opens (URLRouter raised, which daphne
answered with a 500 and a logged traceback). The route has no converters, so the scope gets no
`url_route` (nothing reads it)."""

from __future__ import annotations

from typing import Any, Awaitable
from urllib.parse import urlparse

from channels.security.websocket import WebsocketDenier
from django.urls import path as route_path

from qim.gateway.origin import QimOriginValidator

# Paths whose match is remembered: every client asks for the same one or two, and anything a
# stranger sends is matched anew once this many are known.
PATHS_KEPT = 64


def parsed_origin(scope: dict[str, Any]) -> Any:
    """The Origin header as channels' OriginValidator parses it (the last one wins)."""
    parsed = None
    for name, value in scope.get("headers", []):
        if name == b"origin":
            try:
                parsed = urlparse(value.decode("latin1"))
            except UnicodeDecodeError:
                pass
    return parsed


class WebSocketRoute:
    """One WebSocket path to one consumer class, behind the origin list."""

    def __init__(self, route: str, consumer_class: type, allowed_origins: list[str]) -> None:
        self.pattern = route_path(route, consumer_class).pattern
        self.consumer_class = consumer_class
        self.origins = QimOriginValidator(None, allowed_origins)
        self._matched: dict[str, bool] = {}

    def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[Any]:
        if scope["type"] != "websocket":
            raise ValueError("You cannot use OriginValidator on a non-WebSocket connection")
        path, root_path = scope.get("path") or "", scope.get("root_path", "")
        routed = path.startswith(root_path) and self.matches(path[len(root_path):])
        if not routed or not self.origins.valid_origin(parsed_origin(scope)):
            return WebsocketDenier()(scope, receive, send)
        return self.consumer_class()(scope, receive, send)

    def matches(self, path: str) -> bool:
        """The Django route pattern's answer, remembered per path (a regex and its converters
        per connect otherwise)."""
        known = self._matched.get(path)
        if known is None:
            known = bool(self.pattern.match(path.lstrip("/")))
            if len(self._matched) < PATHS_KEPT:
                self._matched[path] = known
        return known
