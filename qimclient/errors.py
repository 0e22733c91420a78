"""Exceptions raised by qimclient, one per way a call to QIM can fail."""

from __future__ import annotations

from typing import Any


class QimClientError(Exception):
    """Base class, so callers can catch every qimclient failure at once."""


class ApiError(QimClientError):
    """A REST call answered non-2xx; `code` and `message` come from the `{code, message}` body;
    `retry_after_ms` too on `rate_limited` (a throttled login)."""

    def __init__(self, status: int, code: str, message: str, retry_after_ms: int | None = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms


class QimError(QimClientError):
    """The server answered a WebSocket request with `ERROR` (§4); the request had no side effect."""

    def __init__(
        self,
        code: str,
        message: str,
        retry_after_ms: int | None = None,
        frame: dict[str, Any] | None = None,
    ) -> None:
        suffix = f" (retry after {retry_after_ms} ms)" if retry_after_ms is not None else ""
        super().__init__(f"{code}: {message}{suffix}")
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms
        self.frame = frame if frame is not None else {}

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> QimError:
        """Build the error from an `ERROR` frame, tolerating missing fields."""
        return cls(
            code=str(frame.get("code", "unknown")),
            message=str(frame.get("message", "")),
            retry_after_ms=frame.get("retry_after_ms"),
            frame=frame,
        )


class AuthError(QimClientError):
    """The AUTH handshake failed: `ERROR` then close 4401, or close 4408 (no AUTH in time)."""

    def __init__(self, code: str, message: str, close_code: int | None) -> None:
        super().__init__(f"{code}: {message} (close code {close_code})")
        self.code = code
        self.message = message
        self.close_code = close_code


class ConnectionLost(QimClientError, ConnectionError):
    """The socket closed (or was not open) before a request got its answer."""

    def __init__(self, message: str, close_code: int | None = None) -> None:
        super().__init__(message if close_code is None else f"{message} (close code {close_code})")
        self.close_code = close_code
