"""The one Redis connection factory: one asyncio client per event loop (the presence
directory, leases, calls, reaction windows), the rate limiter's storage and readiness probes,
reaching one server (QIM_REDIS_URL) or the master the sentinels name (QIM_REDIS_SENTINELS,
qim/infra/redis_topology.py). The channel layer's config (qim/settings/__init__.py) is the only other place.

Its pool makes a caller wait for a free connection when all QIM_REDIS_MAX_CONNECTIONS are in
use (redis-py's default pool raises MaxConnectionsError instead: 500 sockets joining a room or
disconnecting at once each ask Redis something, and their frames failed as `internal`). A
caller that waits QIM_REDIS_POOL_TIMEOUT_S gets a ConnectionError. Its connections retry on
a broken connection (qim/infra/outage.py), so a redis-server restart costs a reconnect, not errors.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from django.conf import settings
from limits.aio.storage import RedisSentinelStorage, RedisStorage

from qim.infra.outage import resilient_options
from qim.infra.redis_topology import sentinel_client

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis]" = (
    weakref.WeakKeyDictionary()
)


def get_redis() -> aioredis.Redis:
    """The running loop's client: management commands make their own loops, daphne has one."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _new_client()
        _clients[loop] = client
    return client


def _new_client() -> aioredis.Redis:
    options = {"socket_timeout": settings.QIM_REDIS_SOCKET_TIMEOUT_S, **resilient_options()}
    if settings.QIM_REDIS_SENTINELS:
        return _sentinel_master(settings.QIM_REDIS_MAX_CONNECTIONS, settings.QIM_REDIS_POOL_TIMEOUT_S, options)
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.QIM_REDIS_URL,
        decode_responses=True,
        max_connections=settings.QIM_REDIS_MAX_CONNECTIONS,
        timeout=settings.QIM_REDIS_POOL_TIMEOUT_S,
        **options,
    )
    return aioredis.Redis(connection_pool=pool)


def _sentinel_master(max_connections: int, timeout: float, options: dict[str, Any]) -> aioredis.Redis:
    """A client of the master the sentinels name (the first of QIM_REDIS_SENTINEL_MASTER)."""
    return sentinel_client(
        settings.QIM_REDIS_SENTINELS, settings.QIM_REDIS_SENTINEL_MASTERS[0],
        db=settings.QIM_REDIS_DB, password=settings.QIM_REDIS_PASSWORD,
        sentinel_password=settings.QIM_REDIS_SENTINEL_PASSWORD, max_connections=max_connections,
        timeout=timeout, options=options,
    )


def probe_client(timeout: float) -> aioredis.Redis:
    """A client of its own without the pool's retries, for readiness probes (qim/ops/readiness.py):
    one server, or the master the sentinels name now."""
    options = {"socket_connect_timeout": timeout, "socket_timeout": timeout}
    if settings.QIM_REDIS_SENTINELS:
        return _sentinel_master(1, timeout, options)
    return aioredis.Redis.from_url(settings.QIM_REDIS_URL, retry_on_timeout=False, **options)


def redis_configured() -> bool:
    """Whether this process reaches a Redis (qim/infra/backends.py then chooses the Redis family)."""
    return bool(settings.QIM_REDIS_URL)


def redis_passwords() -> list[str]:
    """Every Redis password this process holds, for scrubbing them out of messages."""
    found = [urlsplit(settings.QIM_REDIS_URL).password, settings.QIM_REDIS_PASSWORD, settings.QIM_REDIS_SENTINEL_PASSWORD]
    return [password for password in found if password]


def rate_limit_storage(key_prefix: str) -> RedisStorage:
    """The `limits` library's storage on the same Redis: it opens its own connections from a
    URL; one per event loop, like the clients above. Under Sentinel, windows are read from the
    master only (a lagging replica would let a burst through)."""
    if settings.QIM_REDIS_SENTINELS:
        sentinel_password = settings.QIM_REDIS_SENTINEL_PASSWORD
        return RedisSentinelStorage(
            "async+" + settings.QIM_REDIS_URL, implementation="redispy", key_prefix=key_prefix,
            use_replicas=False, sentinel_kwargs={"password": sentinel_password} if sentinel_password else None,
            db=settings.QIM_REDIS_DB, password=settings.QIM_REDIS_PASSWORD, **resilient_options(),
        )
    return RedisStorage(
        "async+" + settings.QIM_REDIS_URL, implementation="redispy", key_prefix=key_prefix,
        **resilient_options(),
    )
