"""A reader that stops reading: closed once its bounded buffer fills, its room membership and
presence released, and its reconnect (same device) catches up with no gap: every message and
room event sent meanwhile arrives exactly once, by conversation_seq and room_seq."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import Persona, api_ok
from tests.rooms.room_helpers import create_room, join, room_send


@pytest.fixture(scope="module")
def small_buffers(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_MAX_OUTBOUND_BUFFER_BYTES": "262144", "QIM_ROOM_MSG_RATE": "1000",
        "QIM_ROOM_OUTBOUND_FRAME_RATE": "1000", "QIM_PER_USER_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


async def request(ws, frame: dict[str, Any]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Send a frame and read until its reply (pushes before it are skipped)."""
    await ws.send(json.dumps(frame))
    while True:
        reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if reply.get("req_id") == frame["req_id"]:
            return reply


async def wait_until(check, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


async def raw_session(deployment: QimDeployment, sleeper: Persona, **connect: Any):  # type: ignore[no-untyped-def]
    ws = await websockets.connect(deployment.node.ws_url, max_size=None, **connect)
    ok = await request(ws, {"type": "AUTH", "req_id": "a", "token": sleeper.token(), "device_id": "phone"})
    assert ok["type"] == "AUTH_OK"
    return ws


async def test_a_reader_that_stops_is_closed_released_and_catches_up_with_no_gap(small_buffers: QimDeployment) -> None:
    tenant = small_buffers.tenants["acme"]
    sender, sleeper, watcher = tenant.persona("sender"), tenant.persona("sleeper"), tenant.persona("watcher")
    conversation = api_ok(tenant.node, "POST", "conversations", sender.token(),
                          json={"kind": "group", "member_user_ids": [sleeper.user_id]})["conversation_id"]
    room = create_room(sender)
    s, w = await sender.connect(), await watcher.connect()
    await join(s, room)
    assert await w.subscribe_presence([sleeper.user_id]) == {sleeper.user_id: False}

    # The sleeper: its library stops reading the TCP socket once one frame is queued.
    lazy = await raw_session(small_buffers, sleeper, max_queue=1)
    cursor = (await request(lazy, {"type": "SYNC", "req_id": "s", "after_mailbox_seq": 0}))["next_mailbox_seq"]
    room_position = (await request(lazy, {"type": "ROOM_JOIN", "req_id": "j", "room_id": room}))["latest_room_seq"]
    await request(lazy, {"type": "PRESENCE_SUB", "req_id": "p", "user_ids": [watcher.user_id]})
    assert (await w.next_push(timeout=30, type="PRESENCE"))["online"] is True
    assert api_ok(tenant.node, "GET", f"rooms/{room}", sender.token())["online_count"] == 2

    big = "x" * 30_000
    messages, room_events = [], []
    for n in range(400):  # 12 MB of room events the sleeper never reads, and messages
        room_events.append((await room_send(s, room, big))["room_seq"])
        if n % 8 == 0:
            messages.append((await s.request("SEND", conversation_id=conversation, client_msg_id=f"m{n}",
                                             content_type="text", payload={"text": f"m{n}"}))["conversation_seq"])

    # Closed as too slow; its membership and presence released.
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(lazy.recv(), 30)
    stats = small_buffers.node.stats(tenant.admin_token)
    assert stats["counters"].get("slow_sockets_closed", 0) == 1
    offline = await w.next_push(timeout=30, type="PRESENCE")
    assert (offline["user_id"], offline["online"]) == (sleeper.user_id, False)

    async def room_released() -> bool:
        return api_ok(tenant.node, "GET", f"rooms/{room}", sender.token())["online_count"] == 1

    await wait_until(room_released, "the room counts the sleeper out")

    # More traffic while it is away.
    for n in range(5):
        room_events.append((await room_send(s, room, f"after {n}"))["room_seq"])
        messages.append((await s.request("SEND", conversation_id=conversation, client_msg_id=f"after{n}",
                                         content_type="text", payload={"text": f"after {n}"}))["conversation_seq"])

    again = await raw_session(small_buffers, sleeper)
    assert await catch_up_messages(again, cursor, conversation) == messages
    assert await catch_up_room(again, room, room_position) == room_events
    assert (await w.next_push(timeout=30, type="PRESENCE"))["online"] is True
    await again.close()


async def catch_up_messages(ws, cursor: int, conversation: str) -> list[int]:  # type: ignore[no-untyped-def]
    seqs: list[int] = []
    for page in range(1000):
        batch = await request(ws, {"type": "SYNC", "req_id": f"sync{page}", "after_mailbox_seq": cursor})
        seqs += [e["message"]["conversation_seq"] for e in batch["events"]
                 if e["kind"] == "message" and e["conversation_id"] == conversation]
        cursor = batch["next_mailbox_seq"]
        if not batch["has_more"]:
            return seqs
    raise AssertionError("SYNC never ended")


async def catch_up_room(ws, room: str, position: int) -> list[int]:  # type: ignore[no-untyped-def]
    batch = await request(ws, {"type": "ROOM_JOIN", "req_id": "rejoin", "room_id": room, "after_room_seq": position})
    seqs: list[int] = []
    for page in range(1000):
        assert not batch["replay_truncated"], batch.get("replay_truncated_reason")
        seqs += [e["room_seq"] for e in batch["events"]]
        if not batch.get("has_more"):
            return seqs
        batch = await request(ws, {"type": "ROOM_REPLAY", "req_id": f"replay{page}", "room_id": room,
                                   "after_room_seq": seqs[-1]})
    raise AssertionError("replay never ended")
