"""Origin checking for the WebSocket handshake (protocol.md §4, §10)."""

from __future__ import annotations

from channels.security.websocket import OriginValidator


class QimOriginValidator(OriginValidator):
    """Channels' validator, except that a handshake without Origin (a non-browser client) is
    allowed: browsers always send one, so only a browser page can be refused by origin."""

    def valid_origin(self, parsed_origin):  # type: ignore[no-untyped-def]
        if parsed_origin is None:
            return True
        return super().valid_origin(parsed_origin)
