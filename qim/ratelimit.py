"""Hard rate limits (per user, per room) on the `limits` library's moving window.

In memory when embedded; in Redis when QIM_REDIS_URL is set, so a user's budget is shared by
every node they connect to. A refused hit costs nothing and answers how long to wait.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref

from django.conf import settings
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage, RedisSentinelStorage, RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from qim.errors import Refused
from qim.metrics.instruments import count_rate_limited
from qim.outage import resilient_options

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


def _limiter() -> MovingWindowRateLimiter:
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        if settings.QIM_REDIS_SENTINELS:
            storage = sentinel_storage()
        elif settings.QIM_REDIS_URL:
            storage = RedisStorage(
                "async+" + settings.QIM_REDIS_URL, implementation="redispy", key_prefix="qim:rate",
                **resilient_options(),
            )
        else:
            storage = MemoryStorage()
        limiter = MovingWindowRateLimiter(storage)
        _limiters[loop] = limiter
    return limiter


def sentinel_storage() -> RedisSentinelStorage:
    """The windows on the master Sentinel names, never on a replica (a moving window read
    from a lagging replica would let a burst through)."""
    sentinel_password = settings.QIM_REDIS_SENTINEL_PASSWORD
    return RedisSentinelStorage(
        "async+" + settings.QIM_REDIS_URL, implementation="redispy", key_prefix="qim:rate",
        use_replicas=False, sentinel_kwargs={"password": sentinel_password} if sentinel_password else None,
        db=settings.QIM_REDIS_DB, password=settings.QIM_REDIS_PASSWORD, **resilient_options(),
    )


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
