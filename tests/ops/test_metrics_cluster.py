"""/metrics on two nodes sharing PostgreSQL and Redis: each node counts its own sockets, the
node-to-node messages it sent and received, and only the room writer's node holds the room."""

from __future__ import annotations

from qimclient import QimClient
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle
from tests.ops.metrics_helpers import Scrape, scrape, scrape_until
from tests.rooms.room_helpers import collect_room_events, create_room, join, room_send


def url(deployment: QimDeployment, index: int) -> str:
    return f"{deployment.nodes[index].http_url}/metrics"


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


async def wait_for_message(client: QimClient, text: str) -> None:
    while True:
        frame = await client.next_push(timeout=60, type="EVENT")
        if frame["event"].get("message", {}).get("payload", {}).get("text") == text:
            return


async def test_each_node_counts_its_sockets_node_messages_and_room_writers(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    n1, n2 = cluster.nodes
    alice, bob = cluster_acme.persona("alice"), cluster_acme.persona("bob")
    group = create_group(alice, bob)
    room = create_room(alice)
    before = [scrape(url(cluster, i)) for i in (0, 1)]
    a1 = await alice.connect(n1, sync=False)
    b2 = await bob.connect(n2, sync=False)
    await join(a1, room)  # node 1 becomes the writer
    await join(b2, room)
    await send_text(a1, group, "across nodes")
    await wait_for_message(b2, "across nodes")
    await room_send(a1, room, "room across nodes")
    assert len(await collect_room_events(b2, room, 1, timeout=60)) == 1

    first = scrape_until(url(cluster, 0), None, lambda s: s.value("qim_room_writers") == 1)
    second = scrape_until(url(cluster, 1), None, lambda s: s.value("qim_rooms_joined") == 1)
    assert (first.value("qim_connections"), second.value("qim_connections")) == (1, 1)
    assert (first.value("qim_room_writers"), second.value("qim_room_writers")) == (1, 0)
    assert moved(before[0], first, "qim_room_epoch_bumps_total") == 1
    assert moved(before[1], second, "qim_room_epoch_bumps_total") == 0
    assert first.value("qim_room_ring_items") >= 1 and second.value("qim_room_ring_items") == 0
    assert second.value("qim_room_members") == 1
    # The DM push and the room batch went to node 2 over the channel layer (and its count
    # report and ROOM_JOIN call to node 1 the other way).
    assert moved(before[0], first, "qim_node_messages_sent_total") >= 2
    assert moved(before[1], second, "qim_node_messages_received_total") >= 2
    assert moved(before[1], second, "qim_node_messages_sent_total") >= 1
    assert first.value("qim_channel_full_total") == second.value("qim_channel_full_total") == 0
    assert moved(before[1], second, "qim_frames_in_total", type="ROOM_JOIN") == 1
    assert moved(before[1], second, "qim_frames_in_total", type="SEND") == 0
    assert moved(before[0], first, "qim_frames_in_total", type="SEND") == 1
    # Fan-out is timed where the frames are written: the DM's push to Bob on node 2 (from a
    # commit on node 1) is observed by node 2.
    assert moved(before[1], second, "qim_fanout_seconds_count") >= 1
