"""Where Redis is: one server (QIM_REDIS_URL) or a Sentinel-watched master
(QIM_REDIS_SENTINELS + QIM_REDIS_SENTINEL_MASTER), and the channel layer's shards.

Every Redis user builds its connections from here, so all of them follow a failover the same
way: our client (presence directory, room leases, reaction windows, call state;
qim/infra/redis_client.py), the rate limits (`limits`' storage, qim/infra/ratelimit.py) and the channel
layer (channels-redis, whose hosts qim/settings/__init__.py takes from `channel_layer_hosts`). With
Sentinel, each connection asks the sentinels for the master's address when it connects, and
a connection broken by a failover reconnects to the promoted replica (redis-py's
SentinelConnectionPool); until the sentinels have promoted one, calls fail as an outage
(qim/infra/outage.py: frames answer `unavailable`, AUTH closes 4503).

Pure functions of their arguments: qim/settings/ calls them before Django is set up.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool


def parse_sentinels(entries: list[str]) -> list[tuple[str, int]]:
    """["host:port", ...] -> [(host, port), ...] (26379 when the port is left out)."""
    found = []
    for entry in entries:
        host, _, port = entry.strip().rpartition(":") if ":" in entry else (entry.strip(), "", "26379")
        if not host:
            raise ValueError(f"QIM_REDIS_SENTINELS: {entry!r} is not host:port")
        found.append((host, int(port)))
    return found


def sentinel_url(sentinels: list[tuple[str, int]], master: str) -> str:
    """The `redis+sentinel://h:p,h:p/master` form `limits` reads; also what QIM_REDIS_URL
    holds under Sentinel, so that code asking "is Redis configured?" keeps one answer."""
    return "redis+sentinel://" + ",".join(f"{h}:{p}" for h, p in sentinels) + "/" + master


class BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """Sentinel's pool (the master's address asked of the sentinels, re-asked after a
    failover) with the blocking pool's wait for a free connection (qim/infra/redis_client.py)."""


def sentinel_client(
    sentinels: list[tuple[str, int]], master: str, *, db: int, password: str | None,
    sentinel_password: str | None, max_connections: int, timeout: float, options: dict[str, Any],
) -> aioredis.Redis:
    manager = Sentinel(
        sentinels,
        sentinel_kwargs={"password": sentinel_password} if sentinel_password else None,
        socket_timeout=5,
    )
    return manager.master_for(
        master,
        connection_pool_class=BlockingSentinelPool,
        db=db,
        password=password,
        decode_responses=True,
        max_connections=max_connections,
        timeout=timeout,
        **options,
    )


def channel_layer_hosts(
    *, url: str, shard_urls: list[str], sentinels: list[tuple[str, int]], masters: list[str],
    db: int, password: str | None, sentinel_password: str | None, options: dict[str, Any],
) -> list[dict[str, Any]]:
    """channels-redis `hosts`: one entry per shard (it hashes channels and groups over them).

    Sentinel: one shard per master name in QIM_REDIS_SENTINEL_MASTER. Otherwise the shards
    of QIM_CHANNEL_LAYER_REDIS_URLS when given, else QIM_REDIS_URL alone."""
    if sentinels:
        kwargs = {"sentinel_kwargs": {"password": sentinel_password}} if sentinel_password else {}
        auth = {"password": password} if password else {}
        return [
            {"sentinels": sentinels, "master_name": master, "db": db, **auth, **kwargs, **options}
            for master in masters
        ]
    return [{"address": shard, **options} for shard in (shard_urls or [url])]
