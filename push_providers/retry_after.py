"""Reading a provider's Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP date."""

from __future__ import annotations

from email.utils import parsedate_to_datetime

# A Retry-After past this is a provider's mistake or a very long outage: the outbox retries
# after this long at most, and its own attempts limit decides when to give up.
MAX_RETRY_AFTER_S = 3600.0


def retry_after_s(value: str | None, now_s: float) -> float | None:
    """Seconds to wait, from a Retry-After header at wall-clock time `now_s`; None when the
    header is absent or unreadable (the outbox's backoff applies alone)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    return min(max(0.0, when.timestamp() - now_s), MAX_RETRY_AFTER_S)
