"""The presence directory: which nodes hold connections of each online user.

One interface, two implementations (the centrifuge pattern): in-process for the embedded
default, Redis for several nodes. Fan-out asks it where users are so it can send one batch per
node. In Redis every entry carries an expiry that only its node's heartbeat renews, so the
entries of a node that died vanish on their own.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

from qim.backends import register_backend
from qim.conf import limit
from qim.gateway.connection import UserKey
from qim.redis_client import get_redis


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
    (docs/performance.md, "Second round: density")."""

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
        expiry = self._expiry()
        async with self._redis().pipeline(transaction=False) as pipe:
            for user, device_ids in devices.items():
                self._renew(pipe, _user_key(self.USERS, user), {node_id: expiry})
                members = {f"{node_id}|{device}": expiry for device in device_ids}
                self._renew(pipe, _user_key(self.DEVICES, user), members)
            for user in watched:
                self._renew(pipe, _user_key(self.WATCHERS, user), {node_id: expiry})
            pipe.zadd(self.NODES, {node_id: expiry})
            await pipe.execute()

    async def live_nodes(self) -> set[str] | None:
        now = int(time.time() * 1000)
        async with self._redis().pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(self.NODES, "-inf", now)
            pipe.zrangebyscore(self.NODES, now, "+inf")
            _, nodes = await pipe.execute()
        return set(nodes)

    def _renew(self, pipe, key: str, members: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
        if members:
            pipe.zadd(key, members)
            pipe.pexpire(key, self._ttl_ms)


def register_presence_backend() -> None:
    """The directory's two implementations (QimConfig.ready registers them, qim/backends.py)."""
    register_backend(
        "presence",
        memory=MemoryPresenceDirectory,
        redis=lambda: RedisPresenceDirectory(get_redis, ttl_s=limit("presence_ttl_s")),
    )
