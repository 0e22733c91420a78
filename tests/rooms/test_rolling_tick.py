"""A room's tick rolls (issue 22: 5 000-member rooms, rooms/local.py and local_room.py
TickPlan): events that arrive while a tick is under way go out with it to the members it has
not reached yet; the members it already wrote get them at the next tick. Every member gets
every event once, in room_seq order, and one frame per tick.

In-process, like test_tick_gives_way.py: the tick's own code (LocalRooms) on a real event
loop, members whose socket records what it is sent and takes 50 us a frame (a loopback
send()), so a tick to 600 members spans about 30 ms of 1 ms slices (rolls are at least
TickPlan.ROLL_S apart). The writer's second batch arrives through `on_events` while the tick
yields, as it does on a node.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

from qim.node.connection import Connection
from qim.node.foreground import ForegroundWork
from qim.node.outbound import TextFrame
from rooms.budget import FrameBudget
from rooms.local import LocalRooms

MEMBERS = 600
KEY = "acme:lobby"


def event(seq: int) -> dict:
    return {"room_seq": seq, "message_id": f"m{seq}", "sender_id": "u0", "payload": {"text": f"e{seq}"}}


def batch(seqs: list[int]) -> dict:
    """The writer's batch to this node, as RoomService.publish hands it over."""
    return {"room": KEY, "room_id": "lobby", "room_epoch": 1, "latest_room_seq": seqs[-1],
            "earliest_replay_room_seq": 1, "events": [event(seq) for seq in seqs]}


class Member:
    """A member connection whose socket keeps the room_seqs of each frame it is written."""

    def __init__(self, n: int) -> None:
        self.frames: list[list[int]] = []
        self.times: list[float] = []
        self.conn = Connection(f"c{n}", 1, "acme", n, f"u{n}", "phone", False, "", self.record)

    async def record(self, text: str | TextFrame) -> None:
        busy_until = time.perf_counter() + 50e-6
        while time.perf_counter() < busy_until:
            pass
        raw = text.text if isinstance(text, TextFrame) else text
        self.frames.append([e["room_seq"] for e in json.loads(raw)["events"]])
        self.times.append(time.monotonic())

    @property
    def seqs(self) -> list[int]:
        return [seq for frame in self.frames for seq in frame]


async def until(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_events_arriving_mid_tick_join_the_members_not_yet_written() -> None:
    local = LocalRooms(ForegroundWork(), Counter[str]())
    room = local.room(KEY, 1, "lobby")
    members = [Member(n) for n in range(MEMBERS)]
    for member in members:
        room.members.add(member.conn)
        room.sent_upto[member.conn] = 0
    written = lambda: sum(len(m.frames) for m in members)  # noqa: E731

    async def writer_batch_mid_tick() -> None:
        await until(lambda: written() > 0)
        local.on_events(batch([2, 3]))

    local.on_events(batch([1]))
    await asyncio.gather(until(lambda: room.flush_task is not None and written() >= MEMBERS), writer_batch_mid_tick())
    await until(lambda: all(m.seqs == [1, 2, 3] for m in members) and room.flush_task is None)

    early = [m for m in members if m.frames[0] == [1]]
    late = [m for m in members if m.frames[0] == [1, 2, 3]]
    assert early and late, "the batch came in the middle of the first tick"
    assert len(early) + len(late) == MEMBERS
    assert all(m.frames == [[1], [2, 3]] for m in early)  # the rest at the next tick
    assert all(m.frames == [[1, 2, 3]] for m in late)  # nothing twice
    assert room.pending == []  # every member has every event: nothing kept
    assert local.frames_pushed == len(early) * 2 + len(late)


async def test_a_member_joined_since_gets_only_what_its_join_did_not_carry() -> None:
    local = LocalRooms(ForegroundWork(), Counter[str]())
    room = local.room(KEY, 1, "lobby")
    old, joiner = Member(0), Member(1)
    room.members.add(old.conn)
    room.sent_upto[old.conn] = 0
    room.pending = [event(1), event(2)]
    room.meta = batch([1, 2])
    # Joined with a reply up to room_seq 2: events 1 and 2 still pending are not its.
    local.begin_join(joiner.conn, KEY, "lobby")
    await local.finish_join(room, joiner.conn, 2)
    local.on_events(batch([3]))
    await until(lambda: old.seqs == [1, 2, 3] and joiner.seqs == [3] and room.flush_task is None)
    assert joiner.frames == [[3]]
    assert room.pending == []
    local.leave(joiner.conn, KEY, "lobby")
    assert joiner.conn not in room.sent_upto


async def test_a_steady_stream_keeps_order_loses_nothing_and_keeps_the_frame_budget() -> None:
    """Events every 5 ms for 1.5 s while ticks roll over 600 members: each member gets all
    of them, once, in order, and never more than the budget's cap frames in a second."""
    local = LocalRooms(ForegroundWork(), Counter[str]())
    room = local.room(KEY, 1, "lobby")
    members = [Member(n) for n in range(MEMBERS)]
    for member in members:
        room.members.add(member.conn)
        room.sent_upto[member.conn] = 0
    sent = 0
    ends = time.monotonic() + 1.5
    while time.monotonic() < ends:
        sent += 1
        local.on_events(batch([sent]))
        await asyncio.sleep(0.005)
    await until(lambda: all(m.seqs[-1:] == [sent] for m in members) and room.flush_task is None)

    cap = FrameBudget.cap()
    for member in members:
        assert member.seqs == list(range(1, sent + 1))
        times = member.times
        # cap + 1 frames span more than a second: at most room_outbound_frame_rate a second
        # as a client sees it (the budget counts RATE_SLACK, timer jitter aside).
        assert all(times[i + cap] - times[i] >= 1.0 for i in range(len(times) - cap))
    assert any(len(m.frames[0]) > 1 or len(m.frames) < sent for m in members)  # merged: not a frame per event
    assert room.pending == []
