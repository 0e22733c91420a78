"""A node's side of rooms: which local connections are in which room, and outbound merging.

Events arrive from the RoomWriter once per node. Each room flushes at most once per
1/room_outbound_frame_rate seconds: the events that arrived since the last flush go out as one
ROOM_BATCH, encoded once and written to every member socket (§1.3). A connection that is in
several rooms could still exceed the rate, so each connection also has a one-second budget;
a frame over budget is deferred and merged into that connection's next frame. Nothing is
dropped while it is in the window.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from qim.conf import limit
from qim.gateway import codec
from qim.gateway.connection import Connection
from qim.gateway.wire import TextFrame

logger = logging.getLogger(__name__)

# Slack so that timer and delivery jitter (up to a quarter second on a loaded 2-core machine)
# can never squeeze rate + 1 frames into one second as the client sees them.
RATE_SLACK = 1.25


def batch_frame(meta: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "ROOM_BATCH",
        "room_id": meta["room_id"],
        "room_epoch": meta["room_epoch"],
        "events": events,
        "latest_room_seq": meta["latest_room_seq"],
        "earliest_replay_room_seq": meta["earliest_replay_room_seq"],
        "replay_truncated": False,
    }


@dataclass(eq=False)
class LocalRoom:
    key: str
    tenant_id: int
    room_id: str
    members: set[Connection] = field(default_factory=set)
    # Connections whose join is being answered: live events wait here until the reply is out.
    joining: dict[Connection, list[dict[str, Any]]] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    last_flush: float = 0.0
    flush_task: asyncio.TimerHandle | None = None
    reported_holder: str | None = None
    reported_at: float = 0.0

    @property
    def count(self) -> int:
        return len(self.members) + len(self.joining)


class LocalRooms:
    def __init__(self) -> None:
        self.rooms: dict[str, LocalRoom] = {}
        self._sent_at: dict[Connection, deque[float]] = defaultdict(deque)
        self._deferred: dict[Connection, dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]] = defaultdict(dict)
        self._deferred_timer: dict[Connection, asyncio.TimerHandle] = {}
        self.frames_pushed = 0

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
        self._sent_at.pop(conn, None)
        self._deferred.pop(conn, None)
        timer = self._deferred_timer.pop(conn, None)
        if timer is not None:
            timer.cancel()

    # --- events from the writer --------------------------------------------------------

    def on_events(self, message: dict[str, Any]) -> None:
        room = self.rooms.get(message["room"])
        if room is None:
            return
        room.pending.extend(message["events"])
        room.meta = message
        for buffer in room.joining.values():
            buffer.extend(message["events"])
        if room.flush_task is None:
            delay = max(0.0, room.last_flush + self.interval - time.monotonic())
            room.flush_task = asyncio.get_running_loop().call_later(delay, self._flush_soon, room)

    def _flush_soon(self, room: LocalRoom) -> None:
        asyncio.create_task(self.flush(room))

    async def flush(self, room: LocalRoom) -> None:
        room.flush_task = None
        events, room.pending = room.pending, []
        room.last_flush = time.monotonic()
        if not events or not room.members:
            self.forget_if_empty(room)
            return
        # Encoded and framed once: the same bytes go to every member socket (qim/gateway/wire.py).
        text = TextFrame.of(codec.encode(batch_frame(room.meta, events)))
        for conn in list(room.members):
            if self._within_budget(conn):
                await self._push(conn, text)
            else:
                self._defer(conn, room, events)
        # The next tick counts from the end of this one: a flush to many sockets that takes
        # longer than the interval must not make every following flush carry one event.
        room.last_flush = time.monotonic()

    # --- the per-connection budget -----------------------------------------------------------

    def _within_budget(self, conn: Connection) -> bool:
        sent = self._sent_at[conn]
        horizon = time.monotonic() - RATE_SLACK
        while sent and sent[0] <= horizon:
            sent.popleft()
        return len(sent) < limit("room_outbound_frame_rate")

    async def _push(self, conn: Connection, text: str | TextFrame) -> None:
        self._sent_at[conn].append(time.monotonic())
        self.frames_pushed += 1
        try:
            await conn.send_text(text)
        except Exception:
            logger.exception("writing a ROOM_BATCH to %s failed", conn.connection_id)

    def _defer(self, conn: Connection, room: LocalRoom, events: list[dict[str, Any]]) -> None:
        _, held = self._deferred[conn].get(room.key, (room.meta, []))
        self._deferred[conn][room.key] = (room.meta, held + events)
        if conn not in self._deferred_timer:
            oldest = self._sent_at[conn][0] if self._sent_at[conn] else time.monotonic()
            delay = max(0.0, oldest + RATE_SLACK - time.monotonic()) + 0.001
            self._deferred_timer[conn] = asyncio.get_running_loop().call_later(
                delay, lambda: asyncio.create_task(self._flush_deferred(conn))
            )

    async def _flush_deferred(self, conn: Connection) -> None:
        self._deferred_timer.pop(conn, None)
        waiting = self._deferred.get(conn, {})
        while waiting and self._within_budget(conn):
            key = next(iter(waiting))
            meta, events = waiting.pop(key)
            await self._push(conn, codec.encode(batch_frame(meta, events)))
        if waiting:
            oldest = self._sent_at[conn][0]
            delay = max(0.0, oldest + RATE_SLACK - time.monotonic()) + 0.001
            self._deferred_timer[conn] = asyncio.get_running_loop().call_later(
                delay, lambda: asyncio.create_task(self._flush_deferred(conn))
            )
        else:
            self._deferred.pop(conn, None)

    # --- joins ------------------------------------------------------------------------

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
                await self._push(conn, codec.encode(batch_frame(room.meta, fresh)))
        room.joining.pop(conn, None)
        room.members.add(conn)
