"""The presence directory: which nodes hold connections of each online user.

One interface, two implementations (the centrifuge pattern): in-process for the embedded
default, Redis for several nodes. Fan-out asks it where users are so it can send one batch per
node. In Redis every entry carries an expiry that only its node's heartbeat renews, so the
entries of a node that died vanish on their own.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from qim.infra.backends import register_backend
from qim.conf import limit
from qim.node.connection import UserKey
from qim.infra.redis_client import get_redis


class PresenceDirectory(Protocol):
    """Where users are online, and which nodes watch whose presence."""

    # Whether heartbeat() renews per-user entries: when not, the node does not build the
    # list of its devices and watched users for it (O(connections) every heartbeat).
    renews_entries: bool

    async def add(self, node_id: str, user: UserKey, device_id: str) -> None:
        """This node now holds at least one connection of `user` from `device_id`."""

    async def remove(self, node_id: str, user: UserKey, device_id: str, *, user_gone: bool) -> None:
        """This node holds no connection of that device any more (`user_gone`: nor of the user)."""

    async def online_devices(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, set[str]]:
        """user id -> device ids connected anywhere (offline users absent); decides PushTasks."""

    async def device_nodes(self, tenant_id: int, user_id: str, device_id: str) -> set[str]:
        """The nodes holding a connection of that one device (a call's device, rtc/departures.py)."""

    async def nodes_of(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, list[str]]:
        """node id -> those of `user_ids` with a connection there (offline users absent)."""

    async def online(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, bool]:
        """user id -> whether any live node holds a connection of that user."""

    async def watch(self, node_id: str, watched: UserKey) -> None:
        """Some connection on this node subscribed to `watched`'s presence."""

    async def unwatch(self, node_id: str, watched: UserKey) -> None:
        """No connection on this node watches `watched` any more."""

    async def watcher_nodes(self, watched: UserKey) -> list[str]:
        """Nodes with a connection subscribed to `watched`'s presence."""

    async def heartbeat(
        self, node_id: str, devices: dict[UserKey, set[str]], watched: Iterable[UserKey]
    ) -> None:
        """Renew this node's entries; a node that stops calling this fades out."""

    async def live_nodes(self) -> set[str] | None:
        """Nodes whose heartbeat is current; None when there is only this process."""


class MemoryPresenceDirectory:
    """Embedded default: one process holds every connection, so a dict is the truth.

    Per user it keeps a frozenset of node ids shared by every user with the same nodes (here
    almost always the one node) and a tuple of (node, device) pairs, not a set each: a set is
    216 bytes even with one member, and an idle connection paid three of them
    (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths")."""

    renews_entries = False

    def __init__(self) -> None:
        self._nodes_by_user: dict[UserKey, frozenset[str]] = {}
        self._devices: dict[UserKey, tuple[tuple[str, str], ...]] = {}
        self._watchers: dict[UserKey, frozenset[str]] = {}
        self._node_sets: dict[frozenset[str], frozenset[str]] = {}

    def _shared(self, nodes: frozenset[str]) -> frozenset[str]:
        return self._node_sets.setdefault(nodes, nodes)

    def _with_node(self, mapping: dict[UserKey, frozenset[str]], user: UserKey, node_id: str) -> None:
        nodes = mapping.get(user, frozenset())
        if node_id not in nodes:
            mapping[user] = self._shared(nodes | {node_id})

    def _without_node(self, mapping: dict[UserKey, frozenset[str]], user: UserKey, node_id: str) -> None:
        nodes = mapping.get(user)
        if nodes is not None and node_id in nodes:
            if rest := nodes - {node_id}:
                mapping[user] = self._shared(rest)
            else:
                del mapping[user]

    async def add(self, node_id: str, user: UserKey, device_id: str) -> None:
        self._with_node(self._nodes_by_user, user, node_id)
        devices = self._devices.get(user, ())
        if (node_id, device_id) not in devices:
            self._devices[user] = (*devices, (node_id, device_id))

    async def remove(self, node_id: str, user: UserKey, device_id: str, *, user_gone: bool) -> None:
        devices = self._devices.get(user)
        if devices is not None:
            rest = tuple(pair for pair in devices if pair != (node_id, device_id))
            if rest:
                self._devices[user] = rest
            else:
                del self._devices[user]
        if user_gone:
            self._without_node(self._nodes_by_user, user, node_id)

    async def online_devices(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, set[str]]:
        found = {}
        for user_id in user_ids:
            devices = self._devices.get((tenant_id, user_id))
            if devices:
                found[user_id] = {device for _, device in devices}
        return found

    async def device_nodes(self, tenant_id: int, user_id: str, device_id: str) -> set[str]:
        return {node for node, device in self._devices.get((tenant_id, user_id), ()) if device == device_id}

    async def nodes_of(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = defaultdict(list)
        for user_id in user_ids:
            for node_id in self._nodes_by_user.get((tenant_id, user_id), ()):
                grouped[node_id].append(user_id)
        return dict(grouped)

    async def online(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, bool]:
        return {u: bool(self._nodes_by_user.get((tenant_id, u))) for u in user_ids}

    async def watch(self, node_id: str, watched: UserKey) -> None:
        self._with_node(self._watchers, watched, node_id)

    async def unwatch(self, node_id: str, watched: UserKey) -> None:
        self._without_node(self._watchers, watched, node_id)

    async def watcher_nodes(self, watched: UserKey) -> list[str]:
        return sorted(self._watchers.get(watched, ()))

    async def heartbeat(
        self, node_id: str, devices: dict[UserKey, set[str]], watched: Iterable[UserKey]
    ) -> None:
        return None

    async def live_nodes(self) -> set[str] | None:
        return None


# A heartbeat renews a node's entries with this script, RENEW_KEYS_PER_CALL keys a call.
# Issue 22 (two nodes, 5 000 users a node): as one pipeline of ZADD + PEXPIRE per key, the
# heartbeat packed and parsed 20 000 commands in one step of the loop every presence_ttl_s / 3:
# 0.7-1.2 s in which no room tick, frame or node message ran (the two-node room's p99), and
# 1.2-1.8 s of a core even in chunks. A script call per 400 keys: about 0.15 s in all, no step
# over about 30 ms, and redis-server busy about a millisecond a call.
# KEYS: the entries; ARGV: expiry (ms), TTL (ms), then per key its member count and members.
_RENEW = """
local expiry, ttl, at = ARGV[1], ARGV[2], 3
for _, key in ipairs(KEYS) do
  local n = tonumber(ARGV[at])
  for j = at + 1, at + n do redis.call('ZADD', key, expiry, ARGV[j]) end
  at = at + n + 1
  redis.call('PEXPIRE', key, ttl)
end
return #KEYS
"""
RENEW_KEYS_PER_CALL = 400


def _user_key(prefix: str, user: UserKey) -> str:
    return f"{prefix}{user[0]}:{user[1]}"


class RedisPresenceDirectory:
    """Several nodes: per user a sorted set of node ids scored by their expiry (ms).

    A sorted set rather than a hash with a key TTL: a user online on two nodes keeps the key
    alive through the live node, and the dead node's member must still expire on its own.
    Readers ignore members whose score is in the past; writers prune them.
    """

    USERS = "qim:presence:user:"
    DEVICES = "qim:presence:device:"  # members "<node_id>|<device_id>"
    WATCHERS = "qim:presence:watch:"
    NODES = "qim:presence:nodes"
    renews_entries = True

    def __init__(self, redis_factory, ttl_s: float) -> None:  # type: ignore[no-untyped-def]
        self._redis = redis_factory
        self._ttl_ms = int(ttl_s * 1000)

    def _expiry(self) -> int:
        return int(time.time() * 1000) + self._ttl_ms

    async def _set_member(self, key: str, node_id: str) -> None:
        redis = self._redis()
        now = int(time.time() * 1000)
        async with redis.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {node_id: self._expiry()})
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.pexpire(key, self._ttl_ms)
            await pipe.execute()

    async def add(self, node_id: str, user: UserKey, device_id: str) -> None:
        await self._set_member(_user_key(self.DEVICES, user), f"{node_id}|{device_id}")
        await self._set_member(_user_key(self.USERS, user), node_id)

    async def remove(self, node_id: str, user: UserKey, device_id: str, *, user_gone: bool) -> None:
        async with self._redis().pipeline(transaction=False) as pipe:
            pipe.zrem(_user_key(self.DEVICES, user), f"{node_id}|{device_id}")
            if user_gone:
                pipe.zrem(_user_key(self.USERS, user), node_id)
            await pipe.execute()

    async def online_devices(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, set[str]]:
        user_ids = list(user_ids)
        keys = [_user_key(self.DEVICES, (tenant_id, u)) for u in user_ids]
        found = {}
        for user_id, members in zip(user_ids, await self._live_members(keys)):
            if members:
                found[user_id] = {member.split("|", 1)[1] for member in members}
        return found

    async def device_nodes(self, tenant_id: int, user_id: str, device_id: str) -> set[str]:
        (members,) = await self._live_members([_user_key(self.DEVICES, (tenant_id, user_id))])
        return {node for node, _, device in (m.partition("|") for m in members) if device == device_id}

    async def _live_members(self, keys: list[str]) -> list[list[str]]:
        if not keys:
            return []
        now = int(time.time() * 1000)
        async with self._redis().pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrangebyscore(key, now, "+inf")
            return await pipe.execute()

    async def nodes_of(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, list[str]]:
        user_ids = list(user_ids)
        keys = [_user_key(self.USERS, (tenant_id, u)) for u in user_ids]
        grouped: dict[str, list[str]] = defaultdict(list)
        for user_id, nodes in zip(user_ids, await self._live_members(keys)):
            for node_id in nodes:
                grouped[node_id].append(user_id)
        return dict(grouped)

    async def online(self, tenant_id: int, user_ids: Iterable[str]) -> dict[str, bool]:
        user_ids = list(user_ids)
        keys = [_user_key(self.USERS, (tenant_id, u)) for u in user_ids]
        return {u: bool(n) for u, n in zip(user_ids, await self._live_members(keys))}

    async def watch(self, node_id: str, watched: UserKey) -> None:
        await self._set_member(_user_key(self.WATCHERS, watched), node_id)

    async def unwatch(self, node_id: str, watched: UserKey) -> None:
        await self._redis().zrem(_user_key(self.WATCHERS, watched), node_id)

    async def watcher_nodes(self, watched: UserKey) -> list[str]:
        (nodes,) = await self._live_members([_user_key(self.WATCHERS, watched)])
        return sorted(nodes)

    async def heartbeat(
        self, node_id: str, devices: dict[UserKey, set[str]], watched: Iterable[UserKey]
    ) -> None:
        """Renew every entry of this node, RENEW_KEYS_PER_CALL keys a script call: each
        call's packing is a short step of the loop, not one stall for the whole node (see
        _RENEW). The node's own entry goes last: a node is live only once all its users are."""
        expiry, redis = self._expiry(), self._redis()
        keys: list[str] = []
        members: list[Any] = []
        for key, renewed in self._renewals(node_id, devices, watched):
            keys.append(key)
            members += [len(renewed), *renewed]
            if len(keys) >= RENEW_KEYS_PER_CALL:
                await redis.eval(_RENEW, len(keys), *keys, expiry, self._ttl_ms, *members)
                keys, members = [], []
        if keys:
            await redis.eval(_RENEW, len(keys), *keys, expiry, self._ttl_ms, *members)
        await redis.zadd(self.NODES, {node_id: expiry})

    def _renewals(
        self, node_id: str, devices: dict[UserKey, set[str]], watched: Iterable[UserKey]
    ) -> Iterator[tuple[str, list[str]]]:
        """(key, members of this node to renew there) for each of the node's entries."""
        for user, device_ids in devices.items():
            yield _user_key(self.USERS, user), [node_id]
            if device_ids:
                yield _user_key(self.DEVICES, user), [f"{node_id}|{device}" for device in device_ids]
        for user in watched:
            yield _user_key(self.WATCHERS, user), [node_id]

    async def live_nodes(self) -> set[str] | None:
        now = int(time.time() * 1000)
        async with self._redis().pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(self.NODES, "-inf", now)
            pipe.zrangebyscore(self.NODES, now, "+inf")
            _, nodes = await pipe.execute()
        return set(nodes)


def register_presence_backend() -> None:
    """The directory's two implementations (QimConfig.ready registers them, qim/infra/backends.py)."""
    register_backend(
        "presence",
        memory=MemoryPresenceDirectory,
        redis=lambda: RedisPresenceDirectory(get_redis, ttl_s=limit("presence_ttl_s")),
    )
