"""Holding a push under its provider's size limit by shortening the message preview."""

from __future__ import annotations

from collections.abc import Callable

from qim.push.senders import PushSendError

ELLIPSIS = "…"


def fit_preview(payload: dict, encode: Callable[[dict], bytes], limit: int) -> bytes:
    """`encode(payload)` at most `limit` bytes, shortening payload["preview"] (binary search on
    its length, an ellipsis marking the cut) when needed; a permanent PushSendError when even
    no preview does not fit."""
    body = encode(payload)
    preview = payload.get("preview")
    if len(body) <= limit:
        return body
    if not isinstance(preview, str) or not preview:
        raise PushSendError(f"push payload is {len(body)} bytes, over the provider's {limit}", permanent=True)
    low, high, best = 0, len(preview) - 1, None
    while low <= high:
        keep = (low + high) // 2
        candidate = encode({**payload, "preview": preview[:keep] + ELLIPSIS})
        if len(candidate) <= limit:
            best, low = candidate, keep + 1
        else:
            high = keep - 1
    if best is None:
        raise PushSendError(f"push payload is over the provider's {limit} bytes even without a preview", permanent=True)
    return best
