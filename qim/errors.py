"""Refusals raised by actions and access helpers, mapped by each edge (ERROR frame or HTTP)."""

from __future__ import annotations

HTTP_STATUS = {
    "bad_request": 400, "bad_frame": 400, "unauthenticated": 401, "forbidden": 403,
    "not_found": 404, "conflict": 409, "too_large": 413, "unknown_custom_type": 400,
    "window_expired": 403, "rate_limited": 429, "room_limit": 403, "unavailable": 503,
}


class Refused(Exception):
    """A request refused with one of the protocol's error codes; nothing was written."""

    def __init__(self, code: str, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 400)
