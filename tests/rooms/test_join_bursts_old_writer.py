"""A burst of ROOM_JOINs to a writer that does not run room.join_many (a node of an older
release during a rolling upgrade; here the op is switched off with QIM_NODE_CALL_OPS_OFF,
which makes a node answer exactly as such a node's successor does: `unknown_op`): every
joiner still gets its reply and the live events after it, the writer is asked for the batched
op once, and the next burst goes to it as single joins straight away."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.harness.services import PostgresServer
from tests.rooms.room_helpers import collect_room_events, create_room, join, room_send

JOINERS = 40


@pytest.fixture(scope="module")
def old_writer(postgres: PostgresServer, pg_template: str, redis_proc, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir,
                               extra_env={"QIM_NODE_CALL_OPS_OFF": "room.join_many"})
    yield deployment
    deployment.stop()


def counter(node, token: str, name: str) -> int:  # type: ignore[no-untyped-def]
    return node.stats(token)["counters"].get(name, 0)


async def burst(tenant, node, room: str, label: str) -> list:  # type: ignore[no-untyped-def]
    """JOINERS members joining at once on `node`; answers (client, reply) pairs."""
    clients = [await tenant.persona(f"{label}{i}").connect(node) for i in range(JOINERS)]
    replies = await asyncio.gather(*(join(c, room) for c in clients))
    for reply in replies:
        assert reply["type"] == "ROOM_BATCH" and reply["room_id"] == room
    return list(zip(clients, replies))


async def test_bursts_to_a_writer_without_join_many_become_single_joins(old_writer: QimDeployment) -> None:
    n1, n2 = old_writer.nodes
    acme = old_writer.tenants["acme"]
    owner = acme.persona("owner")
    room = create_room(owner)
    o = await owner.connect(n1)
    await join(o, room)  # the writer lives on node 1
    await room_send(o, room, "before")

    joined = await burst(acme, n2, room, "first")
    assert counter(n1, acme.admin_token, "node_calls_unknown_op") == 1  # asked once, in the burst
    joined += await burst(acme, n2, room, "second")
    assert counter(n1, acme.admin_token, "node_calls_unknown_op") == 1  # remembered: not asked again
    assert counter(n2, acme.admin_token, "room_join_single_fallbacks") == 1
    assert counter(n2, acme.admin_token, "room_join_requests") == 2 * JOINERS

    seqs = [(await room_send(o, room, f"after {i}"))["room_seq"] for i in range(3)]
    for i, (client, reply) in enumerate(joined):
        live = await collect_room_events(client, room, len(seqs), timeout=60)
        assert [e["room_seq"] for e in live] == seqs, i
        assert reply["latest_room_seq"] < seqs[0]
    await acme.close_clients()
