"""C-2: a RoomWriter restart moves the epoch up by one; clients replaying from before get
replay_truncated (epoch_changed), jump to latest_room_seq, and never see an ERROR, a seq going
backwards or a duplicate. Embedded (restart of the only node) and two nodes (writer killed)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from qimclient import QimClient
from tests.conftest import QimDeployment, start_cluster, start_embedded
from tests.harness.personas import TenantHandle, api_ok
from tests.harness.traffic import wait_until
from tests.rooms.room_helpers import collect_room_events, create_room, epoch_of, join, room_send


class RoomWatcher:
    """Records every room_seq a client sees, from replies and pushes, and every ERROR."""

    def __init__(self, client: QimClient, room_id: str) -> None:
        self.seen: list[int] = []
        self.errors: list[dict] = []
        client.on_push("ROOM_BATCH", self._batch)
        client.on_push("ERROR", self.errors.append)
        self.room_id = room_id

    def _batch(self, frame: dict) -> None:
        if frame["room_id"] == self.room_id:
            self.seen += [e["room_seq"] for e in frame["events"]]

    def reply(self, frame: dict) -> None:
        self._batch(frame)

    def assert_monotonic(self) -> None:
        assert self.seen == sorted(set(self.seen)), "room_seq went backwards or repeated"


@pytest.fixture(scope="module")
def crash_embedded(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir)
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def crash_cluster(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env={"QIM_ROOM_LEASE_TTL_S": "1.5", "QIM_PRESENCE_TTL_S": "3"})
    yield deployment
    deployment.stop()


async def wait_reconnected(client: QimClient, reconnects_before: int, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while client.reconnects == reconnects_before and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    await client.wait_connected(timeout=timeout)


async def replay_after_restart(client: QimClient, room: str, last_seen: int, watcher: RoomWatcher) -> dict:
    replay = await client.request("ROOM_REPLAY", room_id=room, after_room_seq=last_seen)
    watcher.reply(replay)
    return replay


async def test_c2_embedded_restart(crash_embedded: QimDeployment) -> None:
    tenant: TenantHandle = crash_embedded.tenants["acme"]
    node = crash_embedded.node
    alice = tenant.persona("alice")
    room = create_room(alice)
    client = QimClient(node.ws_url, alice.token(), "phone", reconnect=True)
    await client.connect()
    watcher = RoomWatcher(client, room)
    try:
        first = await join(client, room)
        watcher.reply(first)
        before = [await room_send(client, room, f"b{i}") for i in range(3)]
        await collect_room_events(client, room, 0, timeout=0.5)
        reconnects = client.reconnects
        node.kill()
        node.start()
        await wait_reconnected(client, reconnects)
        rejoined = await join(client, room)
        watcher.reply(rejoined)
        assert rejoined["room_epoch"] == first["room_epoch"] + 1
        replay = await replay_after_restart(client, room, before[-1]["room_seq"], watcher)
        assert replay["events"] == [] and replay["replay_truncated"] is True
        assert replay["replay_truncated_reason"] == "epoch_changed"
        after = await room_send(client, room, "after")
        assert epoch_of(after["room_seq"]) == first["room_epoch"] + 1
        await asyncio.sleep(0.5)
        assert watcher.errors == []
        watcher.assert_monotonic()
        info = api_ok(node, "GET", f"rooms/{room}", alice.token())
        assert info["room_epoch"] == first["room_epoch"] + 1
    finally:
        await client.close()


async def test_c2_two_nodes_writer_killed_node_2_takes_over(crash_cluster: QimDeployment) -> None:
    tenant: TenantHandle = crash_cluster.tenants["acme"]
    n1, n2 = crash_cluster.nodes
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    room = create_room(alice)
    writer_side = QimClient(n1.ws_url, alice.token(), "phone", reconnect=False)
    await writer_side.connect()
    survivor = QimClient(n2.ws_url, bob.token("phone", n2), "phone", reconnect=False)
    await survivor.connect()
    watcher = RoomWatcher(survivor, room)
    try:
        first = await join(writer_side, room)  # node 1 becomes the writer
        watcher.reply(await join(survivor, room))
        before = [await room_send(writer_side, room, f"b{i}") for i in range(3)]
        await collect_room_events(survivor, room, 3)
        n1.kill()
        # Node 2's client replays from its last position: the new writer (node 2) has epoch + 1.
        replay = await replay_after_restart(survivor, room, before[-1]["room_seq"], watcher)
        assert replay["room_epoch"] == first["room_epoch"] + 1
        assert replay["replay_truncated"] is True and replay["replay_truncated_reason"] == "epoch_changed"
        assert replay["events"] == []
        after = await room_send(survivor, room, "after the crash")
        assert epoch_of(after["room_seq"]) == first["room_epoch"] + 1
        assert after["room_seq"] > before[-1]["room_seq"]
        await wait_until(lambda: after["room_seq"] in watcher.seen, 60, "the new epoch's event pushed to node 2's member")
        assert watcher.errors == []
        watcher.assert_monotonic()
    finally:
        await writer_side.close()
        await survivor.close()
        n1.start()
