"""The Redis presence directory against a real redis-server: grouping and expiry."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from qim.gateway.presence import MemoryPresenceDirectory, RedisPresenceDirectory


def redis_directory(redis_proc, ttl_s: float) -> RedisPresenceDirectory:  # type: ignore[no-untyped-def]
    client = aioredis.Redis(host=redis_proc.host, port=redis_proc.port, db=0, decode_responses=True)
    return RedisPresenceDirectory(lambda: client, ttl_s=ttl_s)


async def test_nodes_of_groups_users_by_node(redis_proc) -> None:  # type: ignore[no-untyped-def]
    for directory in (redis_directory(redis_proc, 30), MemoryPresenceDirectory()):
        await directory.add("n1", (1, "dir-alice"), "phone")
        await directory.add("n2", (1, "dir-alice"), "laptop")
        await directory.add("n2", (1, "dir-bob"), "phone")
        await directory.add("n1", (2, "dir-bob"), "phone")  # another tenant's bob
        grouped = await directory.nodes_of(1, ["dir-alice", "dir-bob", "dir-nobody"])
        assert {k: sorted(v) for k, v in grouped.items()} == {"n1": ["dir-alice"], "n2": ["dir-alice", "dir-bob"]}
        assert await directory.online_devices(1, ["dir-alice", "dir-nobody"]) == {"dir-alice": {"phone", "laptop"}}
        await directory.remove("n2", (1, "dir-alice"), "laptop", user_gone=True)
        assert await directory.online(1, ["dir-alice", "dir-nobody"]) == {"dir-alice": True, "dir-nobody": False}
        assert await directory.online_devices(1, ["dir-alice"]) == {"dir-alice": {"phone"}}
        await directory.remove("n1", (1, "dir-alice"), "phone", user_gone=True)
        assert await directory.online(1, ["dir-alice"]) == {"dir-alice": False}
        assert await directory.online_devices(1, ["dir-alice"]) == {}


async def test_a_dead_nodes_entries_expire_while_a_live_node_renews(redis_proc) -> None:  # type: ignore[no-untyped-def]
    directory = redis_directory(redis_proc, ttl_s=0.5)
    user = (1, "dir-carol")
    await directory.add("live", user, "phone")
    await directory.add("dead", user, "laptop")
    await directory.watch("dead", (1, "dir-dave"))
    for _ in range(4):
        await asyncio.sleep(0.25)
        await directory.heartbeat("live", {user: {"phone"}}, [])
    assert list(await directory.nodes_of(1, ["dir-carol"])) == ["live"]
    assert await directory.online_devices(1, ["dir-carol"]) == {"dir-carol": {"phone"}}
    assert await directory.watcher_nodes((1, "dir-dave")) == []
