"""A room as one node holds it (its members, joins under way, events waiting for the next
tick), and the ROOM_BATCH frames its events go out as (rooms/local.py writes them)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.conf import settings

from qim.node.connection import Connection
from qim.node.outbound import TextFrame, outbound_frame_cap
from rooms.batches import Batch, encode_batches


def room_batches(meta: dict[str, Any], events: list[dict[str, Any]]) -> list[Batch]:
    """A room's events as pushed ROOM_BATCH frames: under the outbound frame cap, and at most
    QIM_ROOM_BATCH_MAX_EVENTS events each when it is set (1: one event per frame)."""
    return encode_batches(meta, events, outbound_frame_cap(), settings.QIM_ROOM_BATCH_MAX_EVENTS)


class Held(NamedTuple):
    """A room's events deferred for one connection, the room head to send them under, and
    their encoded size (what QIM_MAX_OUTBOUND_BUFFER_BYTES bounds)."""

    meta: dict[str, Any]
    events: list[dict[str, Any]]
    size: int

    @classmethod
    def of(cls, meta: dict[str, Any], batches: list[Batch]) -> "Held":
        return cls(meta, [event for batch in batches for event in batch.events], sum(b.frame.size for b in batches))


class Planned(NamedTuple):
    """A tick's frames for the members at one position: the newest room_seq they carry."""

    head: int
    batches: list[Batch]
    frames: list[TextFrame]


class TickPlan:
    """A tick's frames per member position: the room's pending events after `upto`, encoded
    once for every member at that position. Events that arrive while the tick is under way
    join the frames of the members it has not reached yet (issue 22: 5 000-member rooms,
    where a tick lasts about 100 ms): `roll` takes them, at most every ROLL_S, so that a
    merged room's tick encodes a few frames, not one per slice."""

    ROLL_S = 0.01

    __slots__ = ("room", "seen", "rolled", "by_upto")

    def __init__(self, room: "LocalRoom") -> None:
        self.room = room
        self.seen = len(room.pending)
        self.rolled = time.monotonic()
        self.by_upto: dict[int, Planned | None] = {}

    def roll(self, now: float) -> None:
        """Take what arrived since the last roll, for the members written from now on."""
        if now - self.rolled >= self.ROLL_S and len(self.room.pending) != self.seen:
            self.seen, self.rolled = len(self.room.pending), now
            self.by_upto.clear()

    def after(self, upto: int) -> Planned | None:
        """What a member sent up to `upto` gets; None when it has everything taken."""
        try:
            return self.by_upto[upto]
        except KeyError:
            pass
        fresh = [event for event in self.room.pending[: self.seen] if event["room_seq"] > upto]
        plan = None
        if fresh:
            batches = room_batches(self.room.meta, fresh)
            plan = Planned(max(event["room_seq"] for event in fresh), batches, [batch.frame for batch in batches])
        self.by_upto[upto] = plan
        return plan


@dataclass(eq=False)
class LocalRoom:
    key: str
    tenant_id: int
    room_id: str
    members: set[Connection] = field(default_factory=set)
    # Connections whose join is being answered: live events wait here until the reply is out.
    joining: dict[Connection, list[dict[str, Any]]] = field(default_factory=dict)
    # Events some member has not been sent yet, in room_seq order; a tick trims what every
    # member has (LocalRooms.flush).
    pending: list[dict[str, Any]] = field(default_factory=list)
    # The newest room_seq each member was sent (or handed to its deferral): a tick writes each
    # member only the pending events after it. A member just joined starts at what its join
    # reply and hand-over reached; one written before events arrived mid-tick gets those at
    # the next tick (rolling ticks, TickPlan).
    sent_upto: dict[Connection, int] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # When the next tick may start (LocalRooms.next_due).
    next_due: float = 0.0
    flush_task: asyncio.TimerHandle | None = None
    reported_holder: str | None = None
    reported_at: float = 0.0
    # The newest room_epoch this node has seen for the room (batches and join replies):
    # batches of an older epoch come from a writer that lost its lease and are dropped here,
    # so no member gets an old epoch's event after a newer one's (fencing, §1.2).
    epoch: int = 0

    @property
    def count(self) -> int:
        return len(self.members) + len(self.joining)
