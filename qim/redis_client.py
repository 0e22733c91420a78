"""One asyncio Redis client per event loop, for the presence directory and leases."""

from __future__ import annotations

import asyncio
import weakref

import redis.asyncio as aioredis
from django.conf import settings

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis]" = (
    weakref.WeakKeyDictionary()
)


def get_redis() -> aioredis.Redis:
    """The running loop's client: management commands make their own loops, daphne has one."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = aioredis.from_url(settings.QIM_REDIS_URL, decode_responses=True)
        _clients[loop] = client
    return client
