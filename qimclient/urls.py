"""Deriving the WebSocket endpoint from the server's HTTP base URL."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

WEBSOCKET_PATH = "/ws/v1"
_SCHEMES = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}


def websocket_url(base_url: str) -> str:
    """Map `http(s)://host[:port][/prefix]` to `ws(s)://host[:port][/prefix]/ws/v1` (§4)."""
    parts = urlsplit(base_url)
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"expected an http(s):// or ws(s):// URL, got {base_url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith(WEBSOCKET_PATH):
        path += WEBSOCKET_PATH
    return urlunsplit((scheme, parts.netloc, path, "", ""))
