"""Hard rate limits (per user, per room) on the `limits` library's moving window.

In memory when embedded; in Redis when qim/infra/backends.py chooses Redis (QIM_REDIS_URL set), so a
user's budget is shared by every node they connect to. A refused hit costs nothing and answers how long to wait.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter

from qim.infra.backends import make_backend, register_backend
from qim.errors import Refused
from qim.infra.instruments import count_rate_limited
from qim.infra.redis_client import rate_limit_storage

_limiters: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, MovingWindowRateLimiter]" = (
    weakref.WeakKeyDictionary()
)


def rate_item(per_second: float) -> RateLimitItem:
    """`limits` counts whole hits per whole seconds: 2.5/s becomes 5 per 2 s."""
    for seconds in range(1, 61):
        amount = per_second * seconds
        if amount >= 1 and math.isclose(amount, round(amount), abs_tol=1e-6):
            return RateLimitItemPerSecond(round(amount), seconds)
    return RateLimitItemPerSecond(max(1, round(per_second)), 1)


def register_rate_limit_backend() -> None:
    """The `limits` storages are the two implementations (QimConfig.ready registers them)."""
    register_backend("rate_limits", memory=MemoryStorage, redis=lambda: rate_limit_storage("qim:rate"))


def _limiter() -> MovingWindowRateLimiter:
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        storage: Storage = make_backend("rate_limits")
        limiter = MovingWindowRateLimiter(storage)
        _limiters[loop] = limiter
    return limiter


async def check_rate(name: str, per_second: float, *identifiers: str) -> None:
    """Take one hit of `name` for `identifiers`, or raise Refused("rate_limited")."""
    refusal = await take_rate(name, per_second, *identifiers)
    if refusal is not None:
        raise refusal


async def take_rate(name: str, per_second: float, *identifiers: str) -> Refused | None:
    """Take one hit, or answer the refusal (nothing taken) for the caller to raise when its
    other checks are done: a SEND's retry still gets its first ACK past the limit."""
    return await take_item(name, rate_item(per_second), f"{per_second:g}/s", *identifiers)


async def take_item(name: str, item: RateLimitItem, shown: str, *identifiers: str) -> Refused | None:
    """`take_rate` for any `limits` item ("10/minute"); `shown` is the rate as the refusal
    message states it."""
    limiter = _limiter()
    if await limiter.hit(item, name, *identifiers):
        return None
    count_rate_limited(name)
    stats = await limiter.get_window_stats(item, name, *identifiers)
    retry_after_ms = max(1, math.ceil((stats.reset_time - time.time()) * 1000))
    return Refused("rate_limited", f"{name} allows {shown}", retry_after_ms=retry_after_ms)
