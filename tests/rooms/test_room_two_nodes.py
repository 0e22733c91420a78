"""Rooms across two nodes: forwarding to the writer, and nothing sent to a node with no members."""

from __future__ import annotations

import asyncio

from tests.conftest import QimDeployment
from tests.harness.personas import TenantHandle, api_ok
from tests.rooms.room_helpers import collect_room_events, create_room, join, room_send


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
