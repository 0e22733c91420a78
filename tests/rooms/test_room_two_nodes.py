"""Rooms across two nodes: forwarding to the writer, and nothing sent to a node with no members."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from redis import asyncio as aioredis

from tests.conftest import QimDeployment, start_cluster
from tests.harness.batches import counter
from tests.harness.personas import TenantHandle, api_ok
from tests.rooms.room_helpers import collect_room_events, create_room, epoch_of, join, room_send


def layer_received(node, token: str) -> int:  # type: ignore[no-untyped-def]
    return node.stats(token)["counters"].get("layer_messages_received", 0)


async def test_send_on_node_2_is_forwarded_to_the_writer_on_node_1(cluster: QimDeployment, cluster_acme: TenantHandle) -> None:
    n1, n2 = cluster.nodes
    alice, bob = cluster_acme.persona("alice"), cluster_acme.persona("bob")
    room = create_room(alice)
    a, b = await alice.connect(n1), await bob.connect(n2)
    await join(a, room)  # the writer lives on node 1
    await join(b, room)
    ack = await room_send(b, room, "from node 2")
    for client in (a, b):
        events = await collect_room_events(client, room, 1)
        assert [e["room_seq"] for e in events] == [ack["room_seq"]]
    info = api_ok(n2, "GET", f"rooms/{room}", bob.token("phone", n2))
    assert info["online_count"] == 2


async def test_a_node_without_members_receives_nothing_for_the_room(cluster: QimDeployment, cluster_acme: TenantHandle) -> None:
    n1, n2 = cluster.nodes
    token = cluster_acme.admin_token
    alice, carol, idle = (cluster_acme.persona(n) for n in ("alice", "carol", "idle"))
    room = create_room(alice)
    await idle.connect(n2)  # node 2 is alive, with a connection, but nobody there is in the room
    a, c = await alice.connect(n1), await carol.connect(n1)
    await join(a, room)
    await join(c, room)
    await asyncio.sleep(1.2)
    before = layer_received(n2, token)
    for i in range(15):  # within the room's burst
        await room_send(a, room, f"local {i}")
    got = await collect_room_events(c, room, 15)
    assert len(got) == 15
    await asyncio.sleep(0.5)
    assert layer_received(n2, token) == before


@pytest.fixture(scope="module")
def small_redis_pool(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """Two nodes allowed 2 Redis connections each (qim/infra/redis_client.py)."""
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env={"QIM_REDIS_MAX_CONNECTIONS": "2"})
    yield deployment
    deployment.stop()


async def test_a_storm_of_joins_waits_for_redis_connections_instead_of_failing(small_redis_pool: QimDeployment) -> None:
    """Every join asks Redis for the room's lease holder; 60 at once on a node allowed 2 Redis
    connections queue for them (redis-py's default pool refused the rest: `internal`)."""
    n1, n2 = small_redis_pool.nodes
    tenant = small_redis_pool.tenants["acme"]
    owner = tenant.persona("owner")
    room = create_room(owner)
    await join(await owner.connect(n1), room)  # the writer lives on node 1
    clients = [await tenant.persona(f"joiner{i}").connect(n2) for i in range(60)]
    replies = await asyncio.gather(*(join(client, room) for client in clients))
    assert all(reply["type"] == "ROOM_BATCH" and reply["room_id"] == room for reply in replies)
    # Each join told the writer node 2's count as it was then, and the writer answered them
    # all; whatever order they reached it in, it keeps the newest (RoomWriter.count_orders).
    assert api_ok(n2, "GET", f"rooms/{room}", tenant.admin_token)["online_count"] == 61
    await tenant.close_clients()


@pytest.fixture(scope="module")
def idle_rooms_cluster(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """Writers give idle rooms up after 1 s; leases last 3 s (renewed every second), rings 1.2 s."""
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env={
        "QIM_ROOM_WRITER_IDLE_S": "1", "QIM_ROOM_LEASE_TTL_S": "3", "QIM_ROOM_LOG_RETENTION_MINUTES": "0.02",
    })
    yield deployment
    deployment.stop()


async def test_an_idle_room_releases_its_redis_lease_and_the_other_node_takes_it(
    idle_rooms_cluster: QimDeployment,
) -> None:
    """The writer deletes its lease in Redis when it retires (RedisLeaseStore.release), not
    leaving it to expire: right after, the key is gone, and a join on node 2 makes node 2 the
    writer at the next epoch."""
    n1, n2 = idle_rooms_cluster.nodes
    tenant = idle_rooms_cluster.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    room = create_room(alice)
    a = await alice.connect(n1)
    first = await join(a, room)  # node 1 becomes the writer
    await room_send(a, room, "before")
    redis = aioredis.Redis.from_url(idle_rooms_cluster.env["QIM_REDIS_URL"], decode_responses=True)
    try:
        [lease] = [k for k in await redis.keys("qim:room:lease:*") if k.endswith(f":{room}")]
        assert (await redis.get(lease)).startswith(f"{n1.node_id}:")
        await a.request("ROOM_LEAVE", room_id=room)

        deadline = asyncio.get_running_loop().time() + 60  # polled: ends once it retired
        while counter(n1, tenant, "room_writers_retired") < 1:
            assert asyncio.get_running_loop().time() < deadline, "node 1 never gave the idle room up"
            await asyncio.sleep(0.05)
        # A lease left to expire would still be there: it was renewed within the last second.
        assert await redis.get(lease) is None
    finally:
        await redis.aclose()

    b = await bob.connect(n2)
    again = await join(b, room, after=first["latest_room_seq"] + 1)
    assert again["room_epoch"] == first["room_epoch"] + 1 and again["replay_truncated_reason"] == "epoch_changed"
    assert epoch_of((await room_send(b, room, "after"))["room_seq"]) == first["room_epoch"] + 1
    assert counter(n2, tenant, "room_writers_retired") == 0
    await tenant.close_clients()
