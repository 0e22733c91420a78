"""qimclient's rooms against real nodes: join, send and receive in order; a lost ROOM_SEND
ACK retried with the same client_msg_id; a brief drop replayed within the epoch by the
automatic rejoin; a server restart reported as epoch_changed and jumped over, never a
room_seq going backwards or twice. The stream's ordering rules against a scripted session."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qimclient import Backoff, QimClient, QimError, RoomSync
from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import Persona, TenantHandle, api_ok
from tests.rooms.room_helpers import create_room, epoch_of

FAST_BACKOFF = Backoff(initial=0.05, maximum=0.5, jitter=0.0)
QUIET = 0.3
E = 1 << 48  # room_seq of counter 0 in epoch 1; epoch n starts at n * E


async def sdk_client(persona: Persona, device_id: str = "phone", node: Any = None, **options: Any) -> QimClient:
    options.setdefault("reconnect", False)
    options.setdefault("sync", False)
    node = node or persona.tenant.node
    client = QimClient(node.ws_url, persona.token(device_id, node), device_id, **options)
    await client.connect()
    persona.tenant.clients.append(client)
    return client


def spy_frames(client: QimClient, frame_type: str) -> list[dict]:
    sent: list[dict] = []
    real = client.request_frame

    async def recording(frame: dict, *, timeout: float | None = None) -> dict:
        if frame.get("type") == frame_type:
            sent.append({k: v for k, v in frame.items() if k != "req_id"})
        return await real(frame, timeout=timeout)

    client.request_frame = recording  # type: ignore[method-assign]
    real_pipelined = client._write_pipelined

    async def recording_pipelined(ws: Any, frames: list[dict]) -> Any:  # a reconnect's catch-up
        sent.extend({k: v for k, v in f.items() if k != "req_id"} for f in frames if f.get("type") == frame_type)
        return await real_pipelined(ws, frames)

    client._write_pipelined = recording_pipelined  # type: ignore[method-assign]
    return sent


async def take(client: QimClient, count: int, room_id: str | None = None, timeout: float = 10.0) -> list[dict]:
    async with asyncio.timeout(timeout):
        return [await client.next_room_event(timeout=None, room_id=room_id) for _ in range(count)]


async def assert_nothing_more(client: QimClient) -> None:
    with pytest.raises(TimeoutError):
        await client.next_room_event(timeout=QUIET)


def seqs(items: list[dict]) -> list[int]:
    return [i["room_seq"] for i in items if i["kind"] == "event"]


def texts(items: list[dict]) -> list[str]:
    return [i["event"]["payload"]["text"] for i in items if i["kind"] == "event"]


async def say(client: QimClient, room: str, text: str, **options: Any) -> dict:
    return await client.room_send(room, "text", {"text": text}, **options)


async def test_join_send_and_receive_in_order_then_leave(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = create_room(alice)
    a, b = await sdk_client(alice), await sdk_client(bob)
    joined = await a.join_room(room)
    assert joined["type"] == "ROOM_BATCH" and joined["events"] == []
    await b.join_room(room)
    acks = [await say(a, room, f"m{i}") for i in range(5)]
    for client in (a, b):  # the sender's own events come back through the stream too
        items = await take(client, 5)
        assert seqs(items) == [ack["room_seq"] for ack in acks] and texts(items) == [f"m{i}" for i in range(5)]
        assert {i["room_id"] for i in items} == {room}
        assert items[0]["event"]["render"] == {"mode": "native", "text": "m0"}
        assert items[0]["event"]["sender_id"] == alice.user_id
        await assert_nothing_more(client)
    state = b.room_state(room)
    assert state is not None and state.last_room_seq == acks[-1]["room_seq"]
    assert state.room_epoch == joined["room_epoch"] == epoch_of(acks[-1]["room_seq"])

    # A latecomer asks for a replay from a position: what it was not handed yet, once.
    carol = acme.persona("carol")
    c = await sdk_client(carol)
    replayed = await c.join_room(room, after_room_seq=acks[1]["room_seq"])
    assert [e["room_seq"] for e in replayed["events"]] == [ack["room_seq"] for ack in acks[2:]]
    assert texts(await take(c, 3)) == ["m2", "m3", "m4"]
    again = await c.room_replay(room, after_room_seq=acks[0]["room_seq"])
    assert len(again["events"]) == 4  # the reply holds them all, the stream repeats none
    await assert_nothing_more(c)

    await b.leave_room(room)
    assert b.room_state(room) is None
    await say(a, room, "after bob left")
    assert texts(await take(a, 1)) == ["after bob left"]
    await assert_nothing_more(b)
    with pytest.raises(QimError) as refused:
        await say(b, room, "not a member")
    assert refused.value.code == "forbidden"
    with pytest.raises(QimError) as missing:
        await b.join_room("no-such-room")
    assert missing.value.code == "not_found" and b.room_state("no-such-room") is None


async def test_room_send_retries_a_lost_ack_with_the_same_client_msg_id(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    room = create_room(alice)
    ids = (f"room-retry-{n}" for n in itertools.count(1))
    a = await sdk_client(alice, reconnect=True, backoff=FAST_BACKOFF, client_msg_ids=lambda: next(ids))
    await a.join_room(room)
    sent = spy_frames(a, "ROOM_SEND")
    lost: list[dict] = []
    real_dispatch = a._dispatch

    def lose_the_first_ack(message: str | bytes) -> None:
        frame = json.loads(message)
        if not lost and frame.get("type") == "ACK" and "room_seq" in frame:
            lost.append(frame)
            assert a._ws is not None
            a._ws.transport.abort()  # the writer appended and answered; the answer dies
            return
        real_dispatch(message)

    a._dispatch = lose_the_first_ack  # type: ignore[method-assign]
    ack = await say(a, room, "exactly once")
    assert lost and (ack["message_id"], ack["room_seq"]) == (lost[0]["message_id"], lost[0]["room_seq"])
    assert [f["client_msg_id"] for f in sent] == ["room-retry-1", "room-retry-1"]
    assert a.reconnects == 1
    # The rejoin replayed the event the dropped socket never delivered; it is handed on once.
    items = await take(a, 1)
    assert seqs(items) == [ack["room_seq"]] and texts(items) == ["exactly once"]
    await assert_nothing_more(a)
    info = api_ok(acme.node, "GET", f"rooms/{room}", alice.token())
    assert info["latest_room_seq"] == ack["room_seq"]  # one event written


async def test_a_brief_drop_replays_what_was_missed_within_the_epoch(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = create_room(alice)
    a = await sdk_client(alice)
    # A reconnect delay long enough that the sends below happen while bob is away.
    b = await sdk_client(bob, reconnect=True, backoff=Backoff(initial=1.0, jitter=0.0))
    joins = spy_frames(b, "ROOM_JOIN")
    await a.join_room(room)
    await b.join_room(room)
    first = await say(a, room, "before")
    seen = await take(b, 1)

    assert b._ws is not None
    b._ws.transport.abort()  # no close frame: a dead network
    async with asyncio.timeout(5):
        while b.is_connected:
            await asyncio.sleep(0.01)
    missed = [await say(a, room, f"missed{i}") for i in range(3)]
    assert b.reconnects == 0, "the sends were meant to happen while bob was away"

    seen += await take(b, 3, timeout=15)
    assert b.reconnects == 1
    assert joins[-1] == {"type": "ROOM_JOIN", "room_id": room, "after_room_seq": first["room_seq"]}
    last = await say(a, room, "after")
    seen += await take(b, 1)
    assert texts(seen) == ["before", "missed0", "missed1", "missed2", "after"]
    assert seqs(seen) == [first["room_seq"], *(m["room_seq"] for m in missed), last["room_seq"]]
    assert all(i["kind"] == "event" for i in seen)  # no truncation inside the window
    state = b.room_state(room)
    assert state is not None and state.truncations == 0 and state.joined.is_set()
    await assert_nothing_more(b)


@pytest.fixture(scope="module")
def private_node(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir)
    yield deployment
    deployment.stop()


async def test_after_a_server_restart_the_client_rejoins_reports_epoch_changed_and_jumps_to_latest(
    private_node: QimDeployment,
) -> None:
    tenant = private_node.tenants["acme"]
    node = private_node.node
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    room = create_room(alice)
    a = await sdk_client(alice, reconnect=True, backoff=FAST_BACKOFF)
    b = await sdk_client(bob, reconnect=True, backoff=FAST_BACKOFF, sync=True)
    joins = spy_frames(b, "ROOM_JOIN")
    everything: list[dict] = []
    b.on_room_event(everything.append)
    errors: list[dict] = []
    b.on_push("ERROR", errors.append)
    first = await a.join_room(room)
    await b.join_room(room)
    before = [await say(a, room, f"b{i}") for i in range(3)]
    assert seqs(await take(b, 3)) == [ack["room_seq"] for ack in before]

    node.kill()
    node.start()
    # Both clients reconnect and rejoin by themselves; the new writer has epoch + 1.
    truncated = await b.next_room_event(timeout=20)
    assert truncated == {
        "kind": "truncated", "room_id": room, "reason": "epoch_changed", "room_epoch": first["room_epoch"] + 1,
        "last_room_seq": before[-1]["room_seq"], "latest_room_seq": (first["room_epoch"] + 1) * E,
    }
    assert joins[-1] == {"type": "ROOM_JOIN", "room_id": room, "after_room_seq": before[-1]["room_seq"]}
    after = await say(a, room, "after the restart")  # waits for alice's rejoin if need be
    assert epoch_of(after["room_seq"]) == first["room_epoch"] + 1
    items = await take(b, 1)
    assert seqs(items) == [after["room_seq"]] and texts(items) == ["after the restart"]
    state = b.room_state(room)
    assert state is not None and state.room_epoch == first["room_epoch"] + 1
    assert state.last_room_seq == after["room_seq"] and state.truncations == 1
    await assert_nothing_more(b)

    assert a.reconnects == b.reconnects == 1 and errors == []
    all_seqs = seqs(everything)
    assert all_seqs == sorted(set(all_seqs)) == [*(ack["room_seq"] for ack in before), after["room_seq"]]
    assert [i["kind"] for i in everything] == ["event"] * 3 + ["truncated", "event"]


# The stream's rules alone, against a scripted session: ROOM_REPLAY answers come back through
# accept(), as the reader would hand them over.


class ScriptedRoom:
    """A room's writer in memory; ROOM_REPLAY answers from `held`."""

    def __init__(self) -> None:
        self.sync: RoomSync | None = None
        self.held: dict[int, dict] = {}
        self.epoch = 1
        self.truncate = False
        # Replies carry at most this many events and say has_more (a reply cut by size).
        self.page: int | None = None
        self.requests: list[tuple[str, dict]] = []

    def latest(self) -> int:
        return max([s for s in self.held if s >> 48 == self.epoch], default=self.epoch * E)

    async def request(self, frame_type: str, /, **fields: Any) -> dict:
        self.requests.append((frame_type, fields))
        after = fields.get("after_room_seq")
        reply = {"type": "ROOM_BATCH", "req_id": f"r{len(self.requests)}", "room_id": fields["room_id"],
                 "room_epoch": self.epoch, "latest_room_seq": self.latest(), "earliest_replay_room_seq": None,
                 "events": [], "replay_truncated": False}
        if self.truncate:
            reply.update(replay_truncated=True, replay_truncated_reason="evicted")
        elif after is not None:
            reply["events"] = [self.held[s] for s in sorted(self.held) if s > after]
        if self.page is not None:
            reply["has_more"] = len(reply["events"]) > self.page
            del reply["events"][self.page:]
        assert self.sync is not None
        self.sync.accept(reply)
        return reply

    def push(self, *room_seqs: int, epoch: int | None = None) -> None:
        events = [self.event(s) for s in room_seqs]
        assert self.sync is not None
        self.sync.accept({"type": "ROOM_BATCH", "room_id": "r", "room_epoch": epoch or self.epoch, "events": events,
                          "latest_room_seq": max(room_seqs), "replay_truncated": False})

    def event(self, room_seq: int) -> dict:
        event = {"room_seq": room_seq, "message_id": f"m{room_seq}", "sender_id": "x", "content_type": "text",
                 "payload": {"text": str(room_seq & (E - 1))}}
        self.held[room_seq] = event
        return event


async def drained(sync: RoomSync) -> list[tuple[str, Any]]:
    """(kind, room_seq or reason) of every item through the pump so far."""
    await asyncio.sleep(0.05)
    return [(i["kind"], i.get("room_seq", i.get("reason"))) for i in sync.drain_items()]


async def test_out_of_order_pushes_gaps_stale_writers_and_epoch_changes() -> None:
    room = ScriptedRoom()
    sync = room.sync = RoomSync(room, gap_grace=0.05)  # type: ignore[arg-type]
    sync.start()
    try:
        sync.track("r")
        await room.request("ROOM_JOIN", room_id="r")  # a fresh join: the stream starts at the head
        room.push(E + 3)                              # overtook 1 and 2 (a deferred frame)
        assert await drained(sync) == []
        room.push(E + 1, E + 2)
        room.push(E + 2)                              # a repeat
        assert await drained(sync) == [("event", E + 1), ("event", E + 2), ("event", E + 3)]

        room.event(E + 4)                             # its push is lost: the replay fills it
        room.push(E + 5)
        await asyncio.sleep(0.2)
        assert await drained(sync) == [("event", E + 4), ("event", E + 5)]
        assert sync.gap_fills == 1 and room.requests[-1] == ("ROOM_REPLAY", {"room_id": "r", "after_room_seq": E + 3})

        room.event(E + 6)                             # lost, and gone from the window too
        room.truncate = True
        room.push(E + 7)
        await asyncio.sleep(0.3)
        room.truncate = False
        assert await drained(sync) == [("truncated", "evicted"), ("event", E + 7)]

        room.epoch = 2                                # a new writer, seen first in a push
        room.push(2 * E + 2, epoch=2)
        room.push(E + 8, epoch=1)                     # the old writer's last words: stale
        room.push(2 * E + 3, epoch=2)
        assert await drained(sync) == [("truncated", "epoch_changed"), ("event", 2 * E + 2), ("event", 2 * E + 3)]
        assert sync.stale_batches == 1
        state = sync.rooms["r"]
        assert (state.room_epoch, state.last_room_seq, state.truncations) == (2, 2 * E + 3, 2)
        sync.forget("r")
        room.push(2 * E + 4, epoch=2)                 # untracked: ignored
        assert await drained(sync) == []
    finally:
        await sync.stop()


async def test_a_reply_cut_by_size_is_followed_by_replays_of_the_rest() -> None:
    room = ScriptedRoom()
    room.page = 3
    sync = room.sync = RoomSync(room, gap_grace=0.05)  # type: ignore[arg-type]
    sync.start()
    try:
        for n in range(1, 9):
            room.event(E + n)
        sync.track("r")
        joined = await room.request("ROOM_JOIN", room_id="r", after_room_seq=E)
        assert joined["has_more"] is True and joined["latest_room_seq"] == E + 8
        room.push(E + 9)                              # live, past the join's head: held meanwhile
        await asyncio.sleep(0.2)
        assert await drained(sync) == [("event", E + n) for n in range(1, 10)]
        assert room.requests[1:] == [("ROOM_REPLAY", {"room_id": "r", "after_room_seq": E + 3}),
                                     ("ROOM_REPLAY", {"room_id": "r", "after_room_seq": E + 6})]
        assert sync.gap_fills == 0 and sync.rooms["r"].truncations == 0
    finally:
        await sync.stop()
