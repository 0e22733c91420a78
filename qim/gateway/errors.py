"""The ERROR frame's codes (protocol.md §4) and the exception handlers raise to send one."""

from __future__ import annotations

from typing import Any

ERROR_CODES = frozenset(
    {
        "bad_frame",
        "unknown_type",
        "unauthenticated",
        "forbidden",
        "not_found",
        "rate_limited",
        "too_large",
        "window_expired",
        "unknown_custom_type",
        "room_limit",
        "conflict",
        "internal",
    }
)


class FrameError(Exception):
    """Raised by a frame handler to refuse a request; the gateway answers ERROR and the
    connection stays up. A refused request must leave no side effect."""

    def __init__(self, code: str, message: str, *, retry_after_ms: int | None = None) -> None:
        assert code in ERROR_CODES, code
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms

    def frame(self, req_id: str | None) -> dict[str, Any]:
        return error_frame(self.code, self.message, req_id, retry_after_ms=self.retry_after_ms)


def error_frame(
    code: str, message: str, req_id: str | None = None, *, retry_after_ms: int | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "ERROR", "code": code, "message": message}
    if req_id is not None:
        frame["req_id"] = req_id
    if retry_after_ms is not None:
        frame["retry_after_ms"] = max(0, int(retry_after_ms))
    return frame
