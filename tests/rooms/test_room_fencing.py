"""Fencing by epoch (issue #17 item 5): a RoomWriter that lost its lease never gets an event
to a member after the next writer's. (a) The writer's node is SIGSTOPped past its lease, node 2
takes the room at epoch + 1, node 1 is SIGCONTed: its ROOM_SENDs are redirected to the new
writer. (b) redis-server is killed and started again empty mid traffic: the lease vanished
with it, the old writer's own clock still says it holds it, and the Redis check
(RoomWriter.check_fence) refuses its appends. In both, room_seq only ascends on every member,
one writer per epoch, nothing acknowledged lost within the current epoch once replayed, and
every member got the whole current epoch live (a node the new writer learned of late included)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import pytest

from qimclient import QimClient
from tests.conftest import QimDeployment, start_cluster
from tests.harness.personas import TenantHandle, api_ok
from tests.harness.redis_server import RedisServer
from tests.rooms.room_checker import RoomAcks, RoomMember, classify
from tests.rooms.room_helpers import create_room, epoch_of, join

pytestmark = pytest.mark.faults

LEASE_TTL_S = 1.5


@pytest.fixture(scope="module")
def fencing_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fencing_cluster(postgres, pg_template, fencing_redis, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, fencing_redis, work_dir, extra_env={
        "QIM_ROOM_LEASE_TTL_S": str(LEASE_TTL_S), "QIM_PRESENCE_TTL_S": "3",
        "QIM_ROOM_MSG_RATE": "1000", "QIM_PER_USER_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


async def wait_for(condition, what: str, timeout: float = 60.0) -> float:  # type: ignore[no-untyped-def]
    """Poll until `condition` holds; the seconds it took. Generous: a fault heals slowly on a
    loaded machine, and the wait ends as soon as it holds."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"{what} not within {timeout} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def keep_sending(client: QimClient, room: str, acks: RoomAcks, stop: asyncio.Event, name: str) -> None:
    i = 0
    while not stop.is_set():
        await acks.send(client, room, f"{name} {i}")
        i += 1
        await asyncio.sleep(0.02)


async def room_with_members(cluster: QimDeployment) -> tuple[str, list[RoomMember], int]:
    """A room whose writer is on node 1, two members on each node; answers its epoch."""
    n1, n2 = cluster.nodes
    tenant: TenantHandle = cluster.tenants["acme"]
    owner = tenant.persona("owner")
    room = create_room(owner)
    members = []
    for node, names in ((n1, ("a1", "c1")), (n2, ("b2", "d2"))):
        for name in names:
            client = await tenant.persona(name).connect(node, sync=False, request_timeout=30)
            members.append(RoomMember(name, client, room))
    first = await join(members[0].client, room)  # node 1 becomes the writer
    members[0].record(first)
    for member in members[1:]:
        member.record(await join(member.client, room))
    return room, members, first["room_epoch"]


async def wait_delivered(cluster: QimDeployment, members: list[RoomMember], last: int, room: str) -> None:
    """Every member got `last` live; on failure, say what each saw and what the nodes counted."""
    try:
        await wait_for(lambda: all(m.seen and m.seen[-1][0] >= last for m in members), "delivery after")
    except AssertionError:
        token = cluster.tenants["acme"].admin_token
        for member in members:
            print(member.name, "last seen", member.seen[-3:], "want", last, hex(last))
        for node in cluster.nodes:
            print(node.node_id, node.stats(token)["counters"])
            print(node.node_id, api_ok(node, "GET", f"rooms/{room}", token))
        raise


async def verdicts(members: list[RoomMember], acks: RoomAcks, epoch: int, before: dict[int, str]) -> None:
    for member in members:
        live = {seq for seq, _ in member.seen}
        verdict = await classify(member, acks, epoch)
        print(f"{member.name}: {verdict}")
        verdict.assert_clean()
        # What was acknowledged before the fault reached every member live.
        assert set(before) <= live, member.name
        # And so did the whole current epoch: a node the new writer learned of late (paused,
        # or its report not yet in) is handed what it missed, in order (RoomWriter.handed),
        # not left to a replay its members had no gap to start from.
        missed = sorted(seq for seq in acks.acked if epoch_of(seq) == epoch and seq not in live)
        assert not missed, f"{member.name} never got {len(missed)} events of epoch {epoch} live: {[hex(s) for s in missed[:5]]}"


async def test_a_writer_paused_past_its_lease_is_fenced(fencing_cluster: QimDeployment) -> None:
    n1, n2 = fencing_cluster.nodes
    room, members, epoch = await room_with_members(fencing_cluster)
    a1, b2 = members[0].client, members[2].client
    acks = RoomAcks()
    for i in range(10):
        await acks.send(a1 if i % 2 else b2, room, f"before {i}")
    before = dict(acks.acked)
    await wait_for(lambda: all(len(m.seen) >= len(before) for m in members), "delivery before the pause")

    assert n1.process is not None
    os.kill(n1.process.pid, signal.SIGSTOP)
    paused = time.monotonic()
    try:
        stalled = [asyncio.ensure_future(acks.send(a1, room, f"paused {i}")) for i in range(3)]
        stop = asyncio.Event()
        sender = asyncio.ensure_future(keep_sending(b2, room, acks, stop, "b2"))
        await wait_for(lambda: any(epoch_of(seq) > epoch for seq in acks.acked), "node 2 taking the room over")
        takeover_s = time.monotonic() - paused
        await asyncio.sleep(0.2)  # node 2 writes at the new epoch for a while (not a timing assumption)
    finally:
        os.kill(n1.process.pid, signal.SIGCONT)
    replies = await asyncio.gather(*stalled)
    await asyncio.sleep(1.0)
    stop.set()
    await sender
    new_epoch = max(epoch_of(seq) for seq in acks.acked)
    assert new_epoch == epoch + 1
    # Node 1's sends held while it was paused: redirected to the new writer, none appended
    # at the old epoch.
    assert all(reply is None or epoch_of(reply["room_seq"]) == new_epoch for reply in replies), replies
    assert [seq for seq in acks.acked if epoch_of(seq) == epoch] == sorted(before)
    assert not acks.errors, acks.errors
    for i in range(5):
        await acks.send(a1, room, f"after {i}")
    await wait_delivered(fencing_cluster, members, max(acks.acked), room)
    print(f"writer takeover after SIGSTOP: {takeover_s:.2f} s (lease {LEASE_TTL_S} s)")
    await verdicts(members, acks, new_epoch, before)
    await fencing_cluster.tenants["acme"].close_clients()


async def test_redis_restarted_empty_mid_room_traffic(fencing_cluster: QimDeployment, fencing_redis: RedisServer) -> None:
    room, members, epoch = await room_with_members(fencing_cluster)
    a1, b2 = members[0].client, members[2].client
    acks = RoomAcks()
    for i in range(10):
        await acks.send(a1 if i % 2 else b2, room, f"before {i}")
    before = dict(acks.acked)
    await wait_for(lambda: all(len(m.seen) >= len(before) for m in members), "delivery before the restart")

    stop = asyncio.Event()
    senders = [asyncio.ensure_future(keep_sending(m.client, room, acks, stop, m.name)) for m in (members[0], members[2])]
    await asyncio.sleep(0.3)
    fencing_redis.kill()
    fencing_redis.start()  # empty: the lease is gone, the writer's clock says it holds it
    restarted = time.monotonic()
    await wait_for(lambda: any(epoch_of(seq) > epoch for seq in acks.acked), "a writer at the next epoch")
    new_writer_s = time.monotonic() - restarted
    await asyncio.sleep(1.5)
    stop.set()
    await asyncio.gather(*senders)
    new_epoch = max(epoch_of(seq) for seq in acks.acked)
    assert set(acks.errors) <= {"unavailable"}, acks.errors
    # One writer per epoch after the restart: the old one appended nothing once the new one
    # wrote, and the epoch grew (room_epoch is in the database, not in Redis).
    stale_after = [seq for seq in acks.acked if epoch_of(seq) < new_epoch and seq > max(before)]
    print(f"redis back -> writer at epoch {new_epoch} in {new_writer_s:.2f} s; "
          f"{len(stale_after)} old-epoch acks around the restart; errors {len(acks.errors)}")
    assert new_epoch > epoch
    for i in range(5):
        await acks.send(b2, room, f"after {i}")
    await wait_delivered(fencing_cluster, members, max(acks.acked), room)
    await verdicts(members, acks, new_epoch, before)
    await fencing_cluster.tenants["acme"].close_clients()


async def test_a_writer_that_takes_its_room_again_after_an_empty_redis_reaches_every_node(
    fencing_cluster: QimDeployment, fencing_redis: RedisServer,
) -> None:
    """The full-w failure made deterministic: Redis restarts empty with the room quiet, then
    node 1's member sends at once, so node 1's process takes the room again (epoch + 1) before
    node 2 has reported its members to the new writer. Node 2's members still get every event
    live, with no later event to show them a gap: the writer hands node 2 what it missed once
    node 2 reports (RoomWriter.handed), and the new lease value makes node 2 report at once."""
    room, members, epoch = await room_with_members(fencing_cluster)
    a1 = members[0].client
    acks = RoomAcks()
    for i in range(3):
        await acks.send(a1, room, f"before {i}")
    await wait_for(lambda: all(len(m.seen) >= 3 for m in members), "delivery before the restart")
    fencing_redis.kill()
    fencing_redis.start()  # empty: no lease, no live nodes, no count of node 2 anywhere
    for i in range(3):
        await acks.send(a1, room, f"after {i}")
    new_epoch = max(epoch_of(seq) for seq in acks.acked)
    assert new_epoch > epoch and set(acks.errors) <= {"unavailable"}, (new_epoch, acks.errors)
    await wait_delivered(fencing_cluster, members, max(acks.acked), room)
    await verdicts(members, acks, new_epoch, {seq: mid for seq, mid in acks.acked.items() if epoch_of(seq) == epoch})
    await fencing_cluster.tenants["acme"].close_clients()
