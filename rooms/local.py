"""A node's side of rooms: which local connections are in which room, and outbound merging.

Events arrive from the RoomWriter once per node. Each room flushes at most once per
1/room_outbound_frame_rate seconds: the events that arrived since the last flush go out as one
ROOM_BATCH, encoded once and written to every member socket (§1.3), or as several when that
frame would exceed the outbound frame cap (rooms/batches.py). A connection that is in several
rooms could still exceed the rate, so each connection also has a one-second budget, which
every frame counts against, cut ones too; a frame over budget is deferred and merged into
that connection's next frame of the room, cut again by size when it goes. Nothing is dropped
while it is in the window, and a room's events reach a connection in room_seq order. What a
connection has deferred is bounded like the bytes it leaves unread (QIM_MAX_OUTBOUND_BUFFER_BYTES,
by encoded size): past it the socket is closed as too slow (4429), and the client heals by
room replay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from typing import Any

from django.conf import settings

from qim.infra.background import spawn
from qim.conf import limit
from qim.node.connection import Connection
from qim.node.foreground import ForegroundWork
from qim.node.outbound import DIRECT, QUEUED, TextFrame
from rooms.batches import Batch
from rooms.budget import RATE_SLACK, FrameBudget
from rooms.local_room import Held, LocalRoom, Planned, TickPlan, room_batches
from rooms.tick_pacing import TICK_GAP, TICK_GIVE_WAY_S, TICK_SLICE_S, yield_to_others

logger = logging.getLogger(__name__)

class LocalRooms:
    def __init__(self, foreground: ForegroundWork, counters: Counter[str]) -> None:
        self.foreground = foreground
        self.counters = counters
        self.rooms: dict[str, LocalRoom] = {}
        self.budget = FrameBudget()
        self._deferred: dict[Connection, dict[str, Held]] = defaultdict(dict)
        self._deferred_timer: dict[Connection, asyncio.TimerHandle] = {}
        # Connections closed for holding too much, until their disconnect.
        self._dropped: set[Connection] = set()
        self.frames_pushed = 0
        # Frames a tick wrote straight to the socket, by how (outbound.DIRECT, outbound.QUEUED),
        # added to the node's counters once per tick.
        self._written = [0, 0, 0]

    @property
    def interval(self) -> float:
        return RATE_SLACK / limit("room_outbound_frame_rate")

    def room(self, key: str, tenant_id: int, room_id: str) -> LocalRoom:
        room = self.rooms.get(key)
        if room is None:
            room = self.rooms[key] = LocalRoom(key, tenant_id, room_id)
        return room

    def forget_if_empty(self, room: LocalRoom) -> None:
        if room.count == 0 and not room.pending:
            self.rooms.pop(room.key, None)

    def forget_connection(self, conn: Connection) -> None:
        self.budget.forget(conn)
        self._dropped.discard(conn)
        self._forget_deferred(conn)

    def _forget_deferred(self, conn: Connection) -> None:
        self._deferred.pop(conn, None)
        timer = self._deferred_timer.pop(conn, None)
        if timer is not None:
            timer.cancel()

    # --- events from the writer --------------------------------------------------------

    def on_events(self, message: dict[str, Any]) -> None:
        room = self.rooms.get(message["room"])
        if room is None or not self.accept_epoch(room, message["room_epoch"]):
            return
        room.pending.extend(message["events"])
        room.meta = message
        for buffer in room.joining.values():
            buffer.extend(message["events"])
        if room.flush_task is None:
            self._schedule_flush(room)

    def accept_epoch(self, room: LocalRoom, epoch: int) -> bool:
        """False for an epoch older than the room's newest here (a stale writer's batch)."""
        if epoch < room.epoch:
            self.counters["room_stale_batches_dropped"] += 1
            logger.warning("dropped a batch of room %s at epoch %s: epoch %s is current", room.key, epoch, room.epoch)
            return False
        room.epoch = epoch
        return True

    def _schedule_flush(self, room: LocalRoom) -> None:
        delay = max(0.0, room.next_due - time.monotonic())
        room.flush_task = asyncio.get_running_loop().call_later(delay, self._flush_soon, room)

    def next_due(self, started: float, ended: float) -> float:
        """When a room's next tick may start: `interval` after this one started, so that a
        big room's tick time does not add to every event's wait (issue 22: 5 000 members),
        plus a cap-th of its duration, so that a member written late in one tick and early in
        a later one still gets at most cap frames in RATE_SLACK seconds (the budget defers
        the one over, at a cost to it); and at least TICK_GAP intervals after it ended, so
        that the loop gets a breath between a big room's back-to-back ticks."""
        took = ended - started
        return max(started + self.interval + took / self.budget.cap(), ended + self.interval * TICK_GAP)

    def _flush_soon(self, room: LocalRoom) -> None:
        spawn(self.flush(room), name="qim-room-tick")

    async def flush(self, room: LocalRoom) -> None:
        """One tick of a room: each member gets the pending events it was not sent yet.
        `flush_task` stays set until the tick ends, so that ticks of one room never overlap
        (they would reorder events on the sockets a yielding tick has not reached yet)."""
        started = time.monotonic()
        try:
            if room.pending and room.members:
                await self._write_tick(room)
        finally:
            self._trim(room)
            room.next_due = self.next_due(started, time.monotonic())
            room.flush_task = None
            if room.pending:
                self._schedule_flush(room)
            else:
                self.forget_if_empty(room)

    @staticmethod
    def _trim(room: LocalRoom) -> None:
        """Drop the pending events every member was sent (members joining get theirs from
        their join buffers)."""
        sent = room.sent_upto
        lowest = min((sent.get(conn, 0) for conn in room.members), default=None)
        if lowest is None:
            room.pending = []
        elif room.pending:
            room.pending = [event for event in room.pending if event["room_seq"] > lowest]

    async def _write_tick(self, room: LocalRoom) -> None:
        # Encoded and framed once per member position: the same bytes go to every member
        # sent up to the same room_seq (qim/server/wire.py, rooms/local_room.py TickPlan).
        plan, members, sent = TickPlan(room), room.members, room.sent_upto
        key, deferred, windows = room.key, self._deferred, self.budget.windows
        cap, max_buffered = self.budget.cap(), settings.QIM_MAX_OUTBOUND_BUFFER_BYTES
        perf_counter = time.perf_counter
        give_way = TICK_GIVE_WAY_S
        slice_ends = now = horizon = 0.0
        # The plan of the last member's position, and its frame when it is one frame: a tick's
        # members are mostly at one position, so this is looked up once per slice.
        upto: int | None = None
        planned: Planned | None = None
        single: TextFrame | None = None
        # The usual member's frames, by how they went (outbound.DIRECT, outbound.QUEUED), counted here
        # and added once per tick (issue 22: the per-frame cost).
        written = [0, 0, 0]
        try:
            for conn in list(members):
                if perf_counter() > slice_ends:
                    now, give_way = await self._between_slices(plan, bool(slice_ends), give_way)
                    slice_ends, horizon, upto = perf_counter() + TICK_SLICE_S, now - RATE_SLACK, None
                if conn not in members:
                    continue  # left, or rejoining, while the tick yielded
                at = sent.get(conn, 0)
                if at != upto:
                    upto, planned = at, plan.after(at)
                    single = planned.frames[0] if planned is not None and len(planned.frames) == 1 else None
                if planned is None:
                    continue
                sent[conn] = planned.head
                # The usual member, written out here (FrameBudget.take and _write_now's checks):
                # one frame, a direct path, budget left, nothing of the room deferred for it.
                window, write_now = windows.get(conn), conn.write_now
                if (
                    single is not None
                    and write_now is not None
                    and window is not None
                    and window.maxlen == cap
                    and (len(window) < cap or window[0] <= horizon)
                    and not (deferred and key in deferred.get(conn, ()))
                ):
                    window.append(now)
                    how = write_now(single, max_buffered)
                    written[how] += 1
                    if not how:
                        await self._write(conn, single)
                    continue
                done = self._write_now(conn, key, planned.frames, cap, now, max_buffered)
                if done < 0:
                    await self._deliver(conn, key, room.meta, planned.batches)
                else:
                    for frame in planned.frames[done:]:
                        await self._write(conn, frame)
        finally:
            self._tally_written(written)

    async def _between_slices(self, plan: TickPlan, yielding: bool, give_way: float) -> tuple[float, float]:
        """Before a tick's slice: other work (a DM's frame, its thread hop, its push) waits for
        one slice of a big room's tick at most, not for all of it, and a conversation frame
        being handled not even that (design C-3: isolation on one node); then the events that
        arrived meanwhile join the plan. Answers when the slice began, which the budget counts
        its frames as sent at (at most a millisecond early, against a window of RATE_SLACK
        seconds), and the give-way time left."""
        if yielding:
            await yield_to_others()
        give_way -= await self._give_way(give_way)
        now = time.monotonic()
        plan.roll(now)
        return now, give_way

    def _write_now(self, conn: Connection, key: str, frames: list[TextFrame], cap: int, now: float,
                   max_buffered: int) -> int:
        """A tick's usual member, without a coroutine (issue 22: the per-frame cost): nothing of
        the room deferred for it and budget for all `frames`, counted here. Answers how many
        the socket took at once (the rest go through `_write`, in order), or -1 when the
        budget or deferred events decide (`_deliver`)."""
        deferred = self._deferred
        if deferred and key in deferred.get(conn, ()):
            return -1
        if not self.budget.take(conn, len(frames), cap, now):
            return -1
        self.frames_pushed += len(frames)
        write_now = conn.write_now
        if write_now is None:
            return 0
        written = self._written
        for done, frame in enumerate(frames):
            how = write_now(frame, max_buffered)
            if not how:
                return done
            written[how] += 1
        return len(frames)

    def _tally_written(self, usual: list[int]) -> None:
        """Add a tick's frames written straight to sockets to the node's counters: `usual`,
        its usual members', by how (counted apart in `_write_tick`), and `_write_now`'s."""
        self.frames_pushed += sum(usual)
        self._written[DIRECT] += usual[DIRECT]
        self._written[QUEUED] += usual[QUEUED]
        direct, queued = self._written[DIRECT], self._written[QUEUED]
        if direct or queued:
            self.counters["frames_written_direct"] += direct
            self.counters["frames_written_queued"] += queued
            self._written = [0, 0, 0]

    async def _give_way(self, at_most: float) -> float:
        waited = await self.foreground.quiet(at_most)
        if waited:
            self.counters["room_tick_give_ways"] += 1
            self.counters["room_tick_gave_way_us"] += round(waited * 1e6)
        return waited

    # --- the per-connection budget (rooms/budget.py) -------------------------------------------

    def _count(self, conn: Connection, frames: int = 1) -> None:
        self.budget.count(conn, frames)
        self.frames_pushed += frames

    async def _write(self, conn: Connection, text: str | TextFrame) -> None:
        try:
            await conn.send_text(text)
        except Exception:
            logger.exception("writing a ROOM_BATCH to %s failed", conn.connection_id)

    async def _push(self, conn: Connection, text: str | TextFrame) -> None:
        self._count(conn)
        await self._write(conn, text)

    async def _deliver(self, conn: Connection, key: str, meta: dict[str, Any], batches: list[Batch]) -> None:
        """A room's frames while the budget allows, the rest deferred; all of them deferred
        while older events of the room wait for this connection (those go first). Planned
        and counted before the first write, so that a flush running meanwhile sees both."""
        waiting = self._deferred.get(conn)
        left = 0 if waiting is not None and key in waiting else self.budget.left(conn)
        now, later = batches[:left], batches[left:]
        if later:
            self._defer(conn, key, meta, later)
        self._count(conn, len(now))
        for batch in now:
            await self._write(conn, batch.frame)

    def _defer(self, conn: Connection, key: str, meta: dict[str, Any], batches: list[Batch]) -> None:
        if conn in self._dropped:
            return  # closed as too slow: it heals by replay once it reconnects
        waiting = self._deferred[conn]
        added = Held.of(meta, batches)
        earlier = waiting.get(key)
        waiting[key] = added if earlier is None else Held(meta, earlier.events + added.events, earlier.size + added.size)
        held_bytes = sum(held.size for held in waiting.values())
        if held_bytes > settings.QIM_MAX_OUTBOUND_BUFFER_BYTES:
            self._drop(conn, f"{held_bytes} bytes of room events deferred")
        elif conn not in self._deferred_timer:
            self._arm_deferred(conn)

    def _drop(self, conn: Connection, why: str) -> None:
        """Close a connection that receives more than its frame budget lets out: what it
        holds is let go (it stays in the rooms' rings), and nothing more is held for it."""
        self._dropped.add(conn)
        self._forget_deferred(conn)
        if conn.drop_too_slow is not None:
            spawn(conn.drop_too_slow(why), name="qim-drop-slow-socket")

    def _arm_deferred(self, conn: Connection) -> None:
        """Flush the deferred frames when the oldest frame of the second leaves the budget."""
        oldest = self.budget.oldest(conn) or time.monotonic()
        delay = max(0.0, oldest + RATE_SLACK - time.monotonic()) + 0.001
        self._deferred_timer[conn] = asyncio.get_running_loop().call_later(
            delay, lambda: spawn(self._flush_deferred(conn), name="qim-room-deferred")
        )

    async def _flush_deferred(self, conn: Connection) -> None:
        self._deferred_timer.pop(conn, None)
        waiting = self._deferred.get(conn)
        if not waiting:
            self._deferred.pop(conn, None)
            return
        planned: list[TextFrame] = []
        left = self.budget.left(conn)
        for key in list(waiting):
            if left <= 0:
                break
            meta, events, _ = waiting.pop(key)
            batches = room_batches(meta, events)
            planned += [batch.frame for batch in batches[:left]]
            # Listed again, at the end (rooms take turns), with what the budget refused: even
            # when that is nothing, a flush meanwhile must queue behind the frames planned here.
            waiting[key] = Held.of(meta, batches[left:])
            left -= min(left, len(batches))
        self._count(conn, len(planned))
        for frame in planned:
            await self._write(conn, frame)
        if self._deferred.get(conn) is not waiting:
            return  # the connection went away meanwhile
        for key in [key for key, held in waiting.items() if not held.events]:
            del waiting[key]
        if waiting:
            if conn not in self._deferred_timer:
                self._arm_deferred(conn)
        else:
            self._deferred.pop(conn, None)

    # --- joins and leaves --------------------------------------------------------------
    # A connection's place in a room (members, joining, sent_upto) and its conn.rooms entry
    # change only here, so a frame handler cannot leave them half undone.

    def begin_join(self, conn: Connection, key: str, room_id: str) -> LocalRoom:
        """A join (or rejoin) starts: live events for `conn` wait in the room's join buffer
        until finish_join hands them over, after the reply."""
        room = self.room(key, conn.tenant_id, room_id)
        room.members.discard(conn)
        room.sent_upto.pop(conn, None)
        room.joining[conn] = []
        conn.rooms.add(room_id)
        return room

    def abort_join(self, room: LocalRoom, conn: Connection) -> None:
        """A join that was not answered: the connection is out of the room (a rejoin too)."""
        room.joining.pop(conn, None)
        conn.rooms.discard(room.room_id)
        self.forget_if_empty(room)

    def leave(self, conn: Connection, key: str, room_id: str) -> bool:
        """The connection leaves the room; False when this node had no such room."""
        conn.rooms.discard(room_id)
        room = self.rooms.get(key)
        if room is None:
            return False
        room.members.discard(conn)
        room.sent_upto.pop(conn, None)
        room.joining.pop(conn, None)
        self.forget_if_empty(room)
        return True

    async def finish_join(self, room: LocalRoom, conn: Connection, reply_latest: int) -> None:
        """After the join's reply went out: hand over what arrived meanwhile, then go live."""
        buffer = room.joining.get(conn)
        if buffer is None:
            return  # it left (or disconnected) while its join was answered
        while buffer:
            fresh = [e for e in buffer if e["room_seq"] > reply_latest]
            buffer.clear()
            if fresh:
                reply_latest = fresh[-1]["room_seq"]
                for batch in room_batches(room.meta, fresh):
                    await self._push(conn, batch.frame)
        room.joining.pop(conn, None)
        room.members.add(conn)
        room.sent_upto[conn] = reply_latest
