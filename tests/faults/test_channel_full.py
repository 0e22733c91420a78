"""A dropped push is healed (issue #17 item 5): node 2 stops reading its channel (SIGSTOP)
while node 1 sends it more than the channel holds (QIM_NODE_CHANNEL_CAPACITY 5). channels-redis
refuses the rest with ChannelFull: node 1 counts and logs each drop (layer_messages_dropped),
and node 2's members recover everything acknowledged, DMs by SYNC and room events by
ROOM_REPLAY (they see the gap in room_seq)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.faults.probes import direct
from tests.faults.test_redis_restart import all_synced
from tests.harness.personas import TenantHandle
from tests.ops.metrics_helpers import scrape
from tests.rooms.room_checker import RoomAcks, RoomMember, classify
from tests.rooms.room_helpers import create_room, epoch_of, join

pytestmark = pytest.mark.faults

CAPACITY = 5
SENDS = 20


@pytest.fixture(scope="module")
def small_channels(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env={
        "QIM_NODE_CHANNEL_CAPACITY": str(CAPACITY), "QIM_ROOM_MSG_RATE": "1000", "QIM_PER_USER_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


def dropped(cluster: QimDeployment, node) -> int:  # type: ignore[no-untyped-def]
    return node.stats(cluster.tenants["acme"].admin_token)["counters"].get("layer_messages_dropped", 0)


async def test_pushes_dropped_on_a_full_channel_are_healed_by_sync_and_replay(small_channels: QimDeployment) -> None:
    n1, n2 = small_channels.nodes
    tenant: TenantHandle = small_channels.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    conversation = direct(alice, bob)
    room = create_room(alice)
    a1 = await alice.connect(n1, sync=False)
    b2 = await bob.connect(n2, sync=False)
    live_dms: list[str] = []
    b2.on_push("EVENT", lambda frame: live_dms.append(frame["event"].get("message", {}).get("message_id")))
    member = RoomMember("b2", b2, room)
    await join(a1, room)  # node 1 holds the writer
    member.record(await join(b2, room))
    acks = RoomAcks()

    assert n2.process is not None
    os.kill(n2.process.pid, signal.SIGSTOP)
    try:
        dms = [(await a1.send_text(conversation, f"dm {i}"))["message_id"] for i in range(SENDS)]
        for i in range(SENDS):
            assert await acks.send(a1, room, f"room {i}") is not None
        # Node 2's channel holds CAPACITY; one more may be taken by the blocking pop node 2
        # had pending in Redis when it was stopped (Redis hands it to the stopped client's
        # socket). Every other message to node 2 is refused and counted.
        assert dropped(small_channels, n1) >= 2 * SENDS - CAPACITY - 1
        # /metrics counts the same drops (qim/ops/metrics/collector.py).
        assert scrape(f"{n1.http_url}/metrics").value("qim_channel_full_total") >= 2 * SENDS - CAPACITY - 1
    finally:
        os.kill(n2.process.pid, signal.SIGCONT)

    # The drops were real: node 2 got at most what its channel held.
    synced = await all_synced(b2)
    assert len([m for m in live_dms if m in dms]) < SENDS
    assert set(dms) <= set(synced) and len(synced) == len(set(synced))
    epoch = epoch_of(max(acks.acked))
    verdict = await classify(member, acks, epoch)
    print(f"dropped {dropped(small_channels, n1)} layer messages; {len(live_dms)} of {SENDS} DMs live; {verdict}")
    assert len(member.seen) < SENDS
    verdict.assert_clean()
    await tenant.close_clients()
