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
