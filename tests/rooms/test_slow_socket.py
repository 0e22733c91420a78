"""A socket that stops reading is closed (4429) instead of growing its node's memory, and the
other members of the room keep receiving everything."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import websockets

from tests.conftest import QimDeployment, start_embedded
from tests.rooms.room_helpers import collect_room_events, create_room, join, room_send


@pytest.fixture(scope="module")
def small_buffers(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_MAX_OUTBOUND_BUFFER_BYTES": "262144", "QIM_ROOM_MSG_RATE": "1000",
        "QIM_ROOM_OUTBOUND_FRAME_RATE": "1000", "QIM_LOG_LEVEL": "ERROR",
    })
    yield deployment
    deployment.stop()


async def test_a_socket_that_does_not_read_is_closed_and_others_are_unaffected(small_buffers: QimDeployment) -> None:
    tenant = small_buffers.tenants["acme"]
    sender, reader, sleeper = tenant.persona("sender"), tenant.persona("reader"), tenant.persona("sleeper")
    room = create_room(sender)
    s, r = await sender.connect(), await reader.connect()
    await join(s, room)
    await join(r, room)
    # A raw client that reads its AUTH_OK and join reply, then nothing: its library stops
    # reading the TCP socket once one frame is queued.
    lazy = await websockets.connect(tenant.node.ws_url, max_queue=1, max_size=None)
    await lazy.send(json.dumps({"type": "AUTH", "token": sleeper.token(), "device_id": "phone"}))
    assert json.loads(await lazy.recv())["type"] == "AUTH_OK"
    await lazy.send(json.dumps({"type": "ROOM_JOIN", "req_id": "j", "room_id": room}))
    assert json.loads(await lazy.recv())["type"] == "ROOM_BATCH"

    big = "x" * 30_000
    sent = [await room_send(s, room, big) for _ in range(400)]  # 12 MB to the lazy socket
    got = await collect_room_events(r, room, len(sent), timeout=30)
    assert [e["room_seq"] for e in got] == [a["room_seq"] for a in sent]
    await asyncio.sleep(0.5)
    stats = small_buffers.node.stats(tenant.admin_token)
    assert stats["counters"].get("slow_sockets_closed", 0) == 1
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(lazy.recv(), 5)


@pytest.fixture(scope="module")
def tight_budget(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """One frame a second per connection, and 256 KiB of room events deferred at most."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_MAX_OUTBOUND_BUFFER_BYTES": "262144", "QIM_ROOM_MSG_RATE": "1000", "QIM_PER_USER_MSG_RATE": "1000",
        "QIM_ROOM_OUTBOUND_FRAME_RATE": "1", "QIM_LOG_LEVEL": "ERROR",
    })
    yield deployment
    deployment.stop()


async def test_a_socket_whose_deferred_room_events_pass_the_limit_is_closed(tight_budget: QimDeployment) -> None:
    """A reader that reads everything but is in more busy rooms than its frame budget lets out:
    what waits for it is bounded like unread bytes, and its room peers are unaffected."""
    tenant = tight_budget.tenants["acme"]
    watcher, busy = tenant.persona("watcher"), tenant.persona("busy")
    senders = [tenant.persona(f"sender{n}") for n in range(4)]
    rooms = [create_room(sender, f"room {n}") for n, sender in enumerate(senders)]
    clients = [await sender.connect() for sender in senders]  # one room each: within budget
    for client, room in zip(clients, rooms):
        await join(client, room)
    w = await watcher.connect()
    await join(w, rooms[0])
    reader = await websockets.connect(tenant.node.ws_url, max_size=None)
    await reader.send(json.dumps({"type": "AUTH", "token": busy.token(), "device_id": "phone"}))
    assert json.loads(await reader.recv())["type"] == "AUTH_OK"
    for room in rooms:
        await reader.send(json.dumps({"type": "ROOM_JOIN", "req_id": room, "room_id": room}))
        assert json.loads(await reader.recv())["type"] == "ROOM_BATCH"

    before = tight_budget.node.stats(tenant.admin_token)["counters"].get("slow_sockets_closed", 0)
    big = "x" * 30_000
    sent = {room: [await room_send(c, room, big) for _ in range(10)] for c, room in zip(clients, rooms)}  # 1.2 MB
    closed = None
    try:
        while True:  # it reads every frame it is given, until the server closes it
            await asyncio.wait_for(reader.recv(), 10)
    except websockets.ConnectionClosed as exc:
        closed = exc
    assert closed is not None
    stats = tight_budget.node.stats(tenant.admin_token)
    assert stats["counters"].get("slow_sockets_closed", 0) == before + 1

    got = await collect_room_events(w, rooms[0], len(sent[rooms[0]]), timeout=30)
    assert [e["room_seq"] for e in got] == [a["room_seq"] for a in sent[rooms[0]]]
    await tenant.close_clients()
