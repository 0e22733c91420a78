"""A room tick gives way to conversation frames being handled (design C-3, isolation on one
node), and only for a bounded time (qim/node/foreground.py, rooms/local.py).

In-process: the tick's own code (LocalRooms) on a real event loop, with member connections
whose socket is a recorder that takes 50 us a frame, so a tick to 300 members spans many
1 ms slices. The event loop is single-threaded, so a foreground frame can only begin while
the tick is between slices, and the tick looks for foreground work before each slice: no
member may get a frame while one is being handled, as long as the tick's budget lasts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from qim.node.connection import Connection
from qim.node.foreground import ForegroundWork
from qim.node.outbound import TextFrame
from rooms.local import TICK_GIVE_WAY_S, LocalRoom, LocalRooms

MEMBERS = 300


def members(written: list[float]) -> list[Connection]:
    async def record(text: str | TextFrame) -> None:
        busy_until = time.perf_counter() + 50e-6  # what a loopback send() costs
        while time.perf_counter() < busy_until:
            pass
        written.append(time.perf_counter())

    return [Connection(f"c{n}", 1, "acme", n, f"u{n}", "phone", False, "", record) for n in range(MEMBERS)]


def lobby(local: LocalRooms, written: list[float]) -> LocalRoom:
    """A room of MEMBERS members with one event to flush."""
    room = local.room("acme:lobby", 1, "lobby")
    room.members.update(members(written))
    room.meta = {"room": "acme:lobby", "room_id": "lobby", "room_epoch": 1, "latest_room_seq": 1,
                 "earliest_replay_room_seq": 1}
    room.pending = [{"room_seq": 1, "message_id": "m1", "sender_id": "u0", "payload": {"text": "hi"}}]
    return room


class AskedForeground(ForegroundWork):
    """ForegroundWork that notes when a tick began to wait for a frame being handled."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    async def quiet(self, at_most: float) -> float:
        if self.running:
            self.asked.append(time.perf_counter())
        return await super().quiet(at_most)


async def tick_during_foreground(
    hold: Callable[[list[float]], Awaitable[None]],
) -> tuple[list[float], tuple[float, float], Counter[str], list[float]]:
    """A tick to MEMBERS members; once it has written its first frames, a foreground frame
    that lasts until `hold(written)` returns. Returns the write times, the frame's (start,
    end), the counters, and when the tick began to wait for the frame."""
    foreground, counters, written = AskedForeground(), Counter[str](), []
    local = LocalRooms(foreground, counters)
    room = lobby(local, written)
    handled: list[float] = []

    async def conversation_frame() -> None:
        while not written:
            await asyncio.sleep(0)
        with foreground.handling():
            handled.append(time.perf_counter())
            await hold(written)
            handled.append(time.perf_counter())

    await asyncio.gather(local.flush(room), conversation_frame())
    return written, (handled[0], handled[1]), counters, foreground.asked


async def five_ms(_: list[float]) -> None:
    await asyncio.sleep(0.005)


async def until_every_member_has_it(written: list[float]) -> None:
    """Held until the tick is done, however slowly a loaded machine runs it (at most 60 s)."""
    deadline = time.perf_counter() + 60
    while len(written) < MEMBERS and time.perf_counter() < deadline:
        await asyncio.sleep(0.001)


async def test_no_member_gets_a_frame_while_a_conversation_frame_is_handled() -> None:
    written, (began, ended), counters, asked = await tick_during_foreground(five_ms)
    assert len(written) == MEMBERS
    assert written[0] < began < ended < written[-1]  # the frame came in the middle of the tick
    assert [t for t in written if began < t < ended] == []
    assert counters["room_tick_give_ways"] == 1 and len(asked) == 1
    # The wait counted is from when the tick asked to the frame's end: on a loaded machine the
    # tick may ask well after the frame began, so it can be under the frame's 5 ms (1 ms
    # allowed for the step between `asked` and quiet()'s own clock).
    assert began < asked[0] < ended
    assert counters["room_tick_gave_way_us"] >= (ended - asked[0]) * 1e6 - 1_000


async def test_a_tick_waits_at_most_its_budget_for_conversation_frames() -> None:
    written, (began, ended), counters, _ = await tick_during_foreground(until_every_member_has_it)
    assert len(written) == MEMBERS
    assert began < written[-1] < ended  # the tick went on while the frame was still handled
    assert counters["room_tick_give_ways"] == 1
    assert TICK_GIVE_WAY_S * 1e6 <= counters["room_tick_gave_way_us"] < 1_000_000


async def test_without_conversation_frames_a_tick_does_not_wait() -> None:
    counters, written = Counter[str](), []
    local = LocalRooms(ForegroundWork(), counters)
    room = lobby(local, written)
    await local.flush(room)
    assert len(written) == MEMBERS
    assert counters["room_tick_give_ways"] == 0
