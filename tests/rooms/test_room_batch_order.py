"""protocol.md §8: a room's events ascend by room_seq within every ROOM_BATCH and across them,
on every member, also on the node that does not hold the room's writer. Several senders on
both nodes send at once, so the writer answers ROOM_SENDs concurrently and sends node 2 one
batch each over the channel layer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from qimclient import QimClient
from tests.conftest import QimDeployment, start_cluster
from tests.rooms.room_helpers import create_room, join, room_send

SENDERS_PER_NODE = 4
SENDS_EACH = 25


class BatchRecorder:
    """Every ROOM_BATCH of one room a client is pushed, in arrival order."""

    def __init__(self, client: QimClient, room_id: str) -> None:
        self.batches: list[list[int]] = []
        self.room_id = room_id
        client.on_push("ROOM_BATCH", self._batch)

    def _batch(self, frame: dict) -> None:
        if frame["room_id"] == self.room_id:
            self.batches.append([event["room_seq"] for event in frame["events"]])

    @property
    def seen(self) -> list[int]:
        return [seq for batch in self.batches for seq in batch]


@pytest.fixture(scope="module")
def busy_cluster(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """Room and per-user rates high enough that every send of the burst is accepted."""
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env={
        "QIM_ROOM_MSG_RATE": "1000", "QIM_PER_USER_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


async def wait_for(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_batches_ascend_on_the_node_without_the_writer(busy_cluster: QimDeployment) -> None:
    n1, n2 = busy_cluster.nodes
    tenant = busy_cluster.tenants["acme"]
    owner = tenant.persona("owner")
    room = create_room(owner)
    writer_side = await owner.connect(n1)
    await join(writer_side, room)  # the writer lives on node 1
    senders = [await tenant.persona(f"s1x{i}").connect(n1) for i in range(SENDERS_PER_NODE)]
    senders += [await tenant.persona(f"s2x{i}").connect(n2) for i in range(SENDERS_PER_NODE)]
    watchers = [await tenant.persona(f"w{i}").connect(n2) for i in range(2)]
    recorders = [BatchRecorder(client, room) for client in (writer_side, *watchers)]
    for client in (*senders, *watchers):
        await join(client, room)

    async def burst(client: QimClient, name: int) -> list[int]:
        return [(await room_send(client, room, f"{name}-{i}"))["room_seq"] for i in range(SENDS_EACH)]

    acked = sorted(seq for seqs in await asyncio.gather(*(burst(c, i) for i, c in enumerate(senders))) for seq in seqs)
    assert len(acked) == len(set(acked)) == SENDERS_PER_NODE * 2 * SENDS_EACH
    for recorder in recorders:
        await wait_for(lambda: len(recorder.seen) >= len(acked))
        for batch in recorder.batches:
            assert batch == sorted(batch), "a ROOM_BATCH's events do not ascend"
        assert recorder.seen == acked, "room_seq did not ascend across batches (or an event was lost)"
    await tenant.close_clients()
