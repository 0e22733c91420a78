"""The Redis presence directory against a real redis-server: grouping and expiry."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from qim.node.presence import RENEW_KEYS_PER_CALL, MemoryPresenceDirectory, RedisPresenceDirectory


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


async def test_a_heartbeat_of_many_users_renews_every_entry_in_several_calls(redis_proc) -> None:  # type: ignore[no-untyped-def]
    """The heartbeat renews RENEW_KEYS_PER_CALL keys a script call (issue 22: one pipeline of
    every key stalled the node's loop): every user of every call stays online past the TTL,
    with its devices and watches; entries no heartbeat renews any more expire, key and all."""
    ttl_s = 4.0  # generous: the checks after a heartbeat must finish within it on a loaded machine
    directory = redis_directory(redis_proc, ttl_s=ttl_s)
    users = [(1, f"hb-many-{i}") for i in range(RENEW_KEYS_PER_CALL)]  # two keys each: several calls
    devices = {user: {"phone", "laptop"} if i % 2 else {"phone"} for i, user in enumerate(users)}
    watched = [(1, "hb-watched-a"), (1, "hb-watched-b")]
    await directory.heartbeat("hb-dead", {(1, "hb-gone"): {"tablet"}}, [(1, "hb-watched-c")])
    dead_until = time.monotonic() + ttl_s + 0.2
    while time.monotonic() < dead_until:  # past the TTL: only what these heartbeats renew is left
        await directory.heartbeat("hb-live", devices, watched)
        await asyncio.sleep(0.5)
    await directory.heartbeat("hb-live", devices, watched)
    user_ids = [user_id for _, user_id in users]
    assert all((await directory.online(1, user_ids)).values())
    found = await directory.online_devices(1, user_ids + ["hb-gone"])
    assert found == {user_id: devices[(1, user_id)] for user_id in user_ids}
    assert list(await directory.nodes_of(1, user_ids[-1:])) == ["hb-live"]
    assert await directory.watcher_nodes((1, "hb-watched-b")) == ["hb-live"]
    assert await directory.watcher_nodes((1, "hb-watched-c")) == []
    assert await directory.live_nodes() >= {"hb-live"} and "hb-dead" not in await directory.live_nodes()
    client = aioredis.Redis(host=redis_proc.host, port=redis_proc.port, db=0, decode_responses=True)
    keys = [RedisPresenceDirectory.DEVICES + "1:" + user_ids[-1], RedisPresenceDirectory.USERS + "1:" + user_ids[0]]
    assert 0 < await client.pttl(keys[0]) <= ttl_s * 1000
    deadline = time.monotonic() + ttl_s + 30
    while await client.exists(*keys) and time.monotonic() < deadline:  # nobody renews: the keys go
        await asyncio.sleep(0.2)
    assert await client.exists(*keys) == 0
