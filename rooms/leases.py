"""Room writer leases: at most one RoomWriter per room at a time (§1.2).

One interface, two implementations: in-process for the embedded default, Redis (SET NX PX,
renew and release only by the holder) for several nodes. A holder is
"<node_id>:<incarnation>.<tenure>" so a restarted node never mistakes its dead predecessor's
lease for its own (the old lease must expire, and the next writer starts a new epoch), and
each time a process takes a room its nodes see a new holder (RoomService._report_once).
"""

from __future__ import annotations

import time
from typing import Protocol

from qim.infra.backends import register_backend
from qim.infra.redis_client import get_redis


class LeaseStore(Protocol):
    async def acquire(self, key: str, holder: str, ttl_s: float) -> bool:
        """Take the lease if nobody holds it."""

    async def renew(self, key: str, holder: str, ttl_s: float) -> bool:
        """Extend the lease if `holder` still holds it (in-process: or held it last and
        nobody took it since); False means it was lost."""

    async def release(self, key: str, holder: str) -> None:
        """Give the lease up if `holder` holds it."""

    async def holders(self, keys: list[str]) -> list[str | None]:
        """The current holder of each key (None when free)."""


class MemoryLeaseStore:
    def __init__(self) -> None:
        self._leases: dict[str, tuple[str, float]] = {}

    def _current(self, key: str) -> str | None:
        lease = self._leases.get(key)
        if lease is None or lease[1] <= time.monotonic():
            return None
        return lease[0]

    async def acquire(self, key: str, holder: str, ttl_s: float) -> bool:
        if self._current(key) is not None:
            return False
        self._leases[key] = (holder, time.monotonic() + ttl_s)
        return True

    async def renew(self, key: str, holder: str, ttl_s: float) -> bool:
        # A lease that lapsed while this process's loop stalled (a reconnect storm) and that
        # nobody took since is still its holder's: one process, so no other writer can exist.
        lease = self._leases.get(key)
        if lease is None or lease[0] != holder:
            return False
        self._leases[key] = (holder, time.monotonic() + ttl_s)
        return True

    async def release(self, key: str, holder: str) -> None:
        if self._current(key) == holder:
            del self._leases[key]

    async def holders(self, keys: list[str]) -> list[str | None]:
        return [self._current(k) for k in keys]


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLeaseStore:
    PREFIX = "qim:room:lease:"

    def __init__(self, redis_factory) -> None:  # type: ignore[no-untyped-def]
        self._redis = redis_factory

    async def acquire(self, key: str, holder: str, ttl_s: float) -> bool:
        return bool(await self._redis().set(self.PREFIX + key, holder, nx=True, px=int(ttl_s * 1000)))

    async def renew(self, key: str, holder: str, ttl_s: float) -> bool:
        return bool(await self._redis().eval(_RENEW, 1, self.PREFIX + key, holder, int(ttl_s * 1000)))

    async def release(self, key: str, holder: str) -> None:
        await self._redis().eval(_RELEASE, 1, self.PREFIX + key, holder)

    async def holders(self, keys: list[str]) -> list[str | None]:
        if not keys:
            return []
        return await self._redis().mget([self.PREFIX + k for k in keys])


def node_of(holder: str) -> str:
    return holder.rsplit(":", 1)[0]


def register_lease_backend() -> None:
    """The two lease stores (RoomsConfig.ready registers them, qim/infra/backends.py chooses)."""
    register_backend("room_leases", memory=MemoryLeaseStore, redis=lambda: RedisLeaseStore(get_redis))
