"""Redis unreachable is an outage, not a bug: how every Redis client of a node rides out a
redis-server restart, and how an error that still gets through is told from a crash.

Every client (ours in qim/infra/redis_client.py, channels-redis' pools, `limits`' storage) opens its
connections with `resilient_options()`: a command that fails on a connection broken by a
restart is retried on a fresh one with exponential backoff, so connections pooled before the
restart never fail on first use. A command that still fails (Redis really gone) raises a
ConnectionError or TimeoutError: frames answer `ERROR unavailable` (qim/gateway/errors.py)
and the log line loses its traceback (RedisOutageFilter).
"""

from __future__ import annotations

import logging
from typing import Any

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# 3 retries after 0.1, 0.2 and 0.4 s: a restart that takes under ~1 s is invisible to
# callers; a longer outage answers within about a second instead of hanging.
RETRIES = 3
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 0.5
# A connection idle this long is PINGed before it is used (redis-py's health check).
HEALTH_CHECK_INTERVAL_S = 10
OUTAGE_ERRORS = (RedisConnectionError, RedisTimeoutError)


def resilient_options() -> dict[str, Any]:
    """redis-py connection options (from_url / ConnectionPool keywords); a fresh Retry each
    call, since redis-py keeps it per connection."""
    return {
        "retry": Retry(ExponentialBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S), RETRIES),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }


def outage_of(error: BaseException | None) -> BaseException | None:
    """The Redis connection error behind `error` (itself, or in its cause chain), if any:
    `limits` wraps it in StorageError, others re-raise it from their own."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OUTAGE_ERRORS):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None


class RedisOutageFilter(logging.Filter):
    """A record whose exception is Redis being unreachable becomes one WARNING line: the
    outage is the operator's to see once per failing step, not a traceback per request (and
    not an ERROR: nothing here is a bug)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        outage = outage_of(error)
        if outage is not None:
            record.msg = f"{record.getMessage()}: Redis unreachable ({type(outage).__name__}: {outage})"
            record.args = None
            record.exc_info, record.exc_text = None, None
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
