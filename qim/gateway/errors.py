"""The ERROR frame's codes (protocol.md §4) and the exception handlers raise to send one."""

from __future__ import annotations

from typing import Any

from qim.infra.db_outage import MESSAGE as UNAVAILABLE_MESSAGE
from qim.infra.db_outage import RETRY_AFTER_MS, is_database_unavailable
from qim.errors import Refused
from qim.infra.instruments import count_error
from qim.infra.outage import outage_of

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
        # Ours: the database or Redis is unreachable; retry later.
        "unavailable",
        # Ours: a well-formed frame naming what it may not (issue #34: a mention of a
        # non-member, more than max_mentions_per_message).
        "bad_request",
    }
)


def refusal_frame(refused: Refused, req_id: str | None) -> dict[str, Any]:
    """The ERROR frame of a refusal; codes outside the protocol's list become bad_frame."""
    code = refused.code if refused.code in ERROR_CODES else "bad_frame"
    return error_frame(code, refused.message, req_id, retry_after_ms=refused.retry_after_ms)


def error_frame(
    code: str, message: str, req_id: str | None = None, *, retry_after_ms: int | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "ERROR", "code": code, "message": message}
    count_error(code)  # every ERROR frame is built here, and each one built is sent
    if req_id is not None:
        frame["req_id"] = req_id
    if retry_after_ms is not None:
        frame["retry_after_ms"] = max(0, int(retry_after_ms))
    return frame


def unavailable_or_internal(error: BaseException, req_id: str | None) -> dict[str, Any]:
    """The ERROR for a handler that raised: `unavailable` (retry later) when the database is
    away or Redis unreachable, else `internal` (a bug)."""
    if is_database_unavailable(error):
        return error_frame("unavailable", UNAVAILABLE_MESSAGE, req_id, retry_after_ms=RETRY_AFTER_MS)
    if outage_of(error) is not None:
        return outage_frame(req_id)
    return error_frame("internal", "the server failed to handle this frame", req_id)


def outage_frame(req_id: str | None) -> dict[str, Any]:
    """The answer to a frame whose handler found Redis unreachable (qim/infra/outage.py)."""
    return error_frame(
        "unavailable", "Redis is unreachable; retry later", req_id, retry_after_ms=RETRY_AFTER_MS
    )
