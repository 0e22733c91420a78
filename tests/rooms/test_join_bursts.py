"""A burst of ROOM_JOINs on the node that is not the room's writer (rooms/join_batches.py:
one writer call per burst): each joiner gets its own reply, then the live events after it,
in order, with no gap and no duplicate, while messages are sent during the burst."""

from __future__ import annotations

import asyncio

import pytest
from qimclient import QimError

from tests.conftest import QimDeployment, tenant_fixture
from tests.rooms.room_helpers import collect_room_events, create_room, join, room_send

JOINERS = 40
BEFORE = 5  # messages in the room before the burst
DURING = 10  # messages sent while the burst runs
AFTER = 3  # messages after every join was answered

cluster_globex = tenant_fixture("cluster", "globex")


def counters(node, token: str) -> dict:  # type: ignore[no-untyped-def]
    return node.stats(token)["counters"]


async def test_a_burst_of_joins_on_the_other_node(cluster: QimDeployment, cluster_acme, cluster_globex) -> None:  # type: ignore[no-untyped-def]
    n1, n2 = cluster.nodes
    owner = cluster_acme.persona("owner")
    room = create_room(owner)
    o = await owner.connect(n1)
    await join(o, room)  # the writer lives on node 1
    seqs = [(await room_send(o, room, f"before {i}"))["room_seq"] for i in range(BEFORE)]
    clients = [await cluster_acme.persona(f"burst{i}").connect(n2) for i in range(JOINERS)]
    outsider = await cluster_globex.persona("mallory").connect(n2)
    before = counters(n2, cluster_acme.admin_token)

    async def send_during() -> list[int]:
        return [(await room_send(o, room, f"during {i}"))["room_seq"] for i in range(DURING)]

    async def refused() -> str:
        with pytest.raises(QimError) as error:
            await join(outsider, room)
        return error.value.code

    # Even joiners replay from the first message; odd ones join at the head.
    joins = [join(c, room, after=seqs[0] if i % 2 == 0 else None) for i, c in enumerate(clients)]
    *replies, during, outsider_code = await asyncio.gather(*joins, send_during(), refused())
    assert outsider_code == "not_found"  # another tenant's room answers like a missing one
    seqs += during
    seqs += [(await room_send(o, room, f"after {i}"))["room_seq"] for i in range(AFTER)]
    epochs = {reply["room_epoch"] for reply in replies}
    assert len(epochs) == 1 and {s >> 48 for s in seqs} == epochs
    for i, (client, reply) in enumerate(zip(clients, replies)):
        assert reply["type"] == "ROOM_BATCH" and reply["room_id"] == room
        latest = reply["latest_room_seq"]
        assert seqs[BEFORE - 1] <= latest <= seqs[BEFORE + DURING - 1]
        replayed = [e["room_seq"] for e in reply["events"]]
        if i % 2 == 0:  # its replay: every message after the first, up to the reply's head
            assert replayed == [s for s in seqs if seqs[0] < s <= latest]
        else:
            assert replayed == []
        live = await collect_room_events(client, room, len([s for s in seqs if s > latest]), timeout=60)
        assert [e["room_seq"] for e in live] == [s for s in seqs if s > latest], i
    after = counters(n2, cluster_acme.admin_token)
    requests = after.get("room_join_requests", 0) - before.get("room_join_requests", 0)
    calls = after.get("room_join_batches", 0) - before.get("room_join_batches", 0)
    assert requests == JOINERS and 1 <= calls < JOINERS  # coalesced: fewer writer calls than joins
    await cluster_acme.close_clients()
    await cluster_globex.close_clients()


async def test_the_first_tick_after_the_joins_writes_them_as_usual_members(cluster: QimDeployment, cluster_acme) -> None:  # type: ignore[no-untyped-def]
    """Members whose joins were answered before the room's next event are usual members of
    that tick: each gets every new event once, in order, on both nodes (the first tick after
    a join burst of 5 000 had every member on a slow path of its own: issue 22, two nodes;
    rolling ticks now write each member from its own sent_upto, rooms/local_room.py)."""
    n1, n2 = cluster.nodes
    owner = cluster_acme.persona("first-tick-owner")
    room = create_room(owner)
    o = await owner.connect(n1)
    await join(o, room)
    await room_send(o, room, "before")
    clients = [await cluster_acme.persona(f"first-tick{i}").connect(n1 if i % 2 else n2) for i in range(JOINERS)]
    await asyncio.gather(*(join(c, room) for c in clients))
    seqs = [(await room_send(o, room, f"after {i}"))["room_seq"] for i in range(AFTER)]
    for i, client in enumerate(clients):
        live = await collect_room_events(client, room, AFTER, timeout=60)
        assert [e["room_seq"] for e in live] == seqs, i
    with pytest.raises((TimeoutError, asyncio.TimeoutError)):
        await clients[0].next_push(timeout=1.0, type="ROOM_BATCH")  # nothing twice
    await cluster_acme.close_clients()
