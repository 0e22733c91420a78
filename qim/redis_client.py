"""The one Redis connection factory: one asyncio client per event loop (the presence
directory, leases, calls, reaction windows) and the rate limiter's storage. Reaching Redis
another way (Sentinel) changes this module and the channel-layer config (qim/settings.py).

Its pool makes a caller wait for a free connection when all QIM_REDIS_MAX_CONNECTIONS are in
use (redis-py's default pool raises MaxConnectionsError instead: 500 sockets joining a room or
disconnecting at once each ask Redis something, and their frames failed as `internal`). A
caller that waits QIM_REDIS_POOL_TIMEOUT_S gets a ConnectionError. Its connections retry on
a broken connection (qim/outage.py), so a redis-server restart costs a reconnect, not errors.
"""

from __future__ import annotations

import asyncio
import weakref

import redis.asyncio as aioredis
from django.conf import settings
from limits.aio.storage import RedisStorage

from qim.outage import resilient_options

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis]" = (
    weakref.WeakKeyDictionary()
)


def get_redis() -> aioredis.Redis:
    """The running loop's client: management commands make their own loops, daphne has one."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.QIM_REDIS_URL,
            decode_responses=True,
            max_connections=settings.QIM_REDIS_MAX_CONNECTIONS,
            timeout=settings.QIM_REDIS_POOL_TIMEOUT_S,
            socket_timeout=settings.QIM_REDIS_SOCKET_TIMEOUT_S,
            **resilient_options(),
        )
        client = aioredis.Redis(connection_pool=pool)
        _clients[loop] = client
    return client


def redis_configured() -> bool:
    """Whether this process reaches a Redis (qim/backends.py then chooses the Redis family)."""
    return bool(settings.QIM_REDIS_URL)


def rate_limit_storage(key_prefix: str) -> RedisStorage:
    """The `limits` library's storage on the same Redis: it opens its own connections from a
    URL (its RedisSentinelStorage for Sentinel); one per event loop, like the clients above."""
    return RedisStorage(
        "async+" + settings.QIM_REDIS_URL, implementation="redispy", key_prefix=key_prefix,
        **resilient_options(),
    )
