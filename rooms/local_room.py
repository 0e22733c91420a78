"""A room as one node holds it (its members, joins under way, events waiting for the next
tick), and the ROOM_BATCH frames its events go out as (rooms/local.py writes them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.conf import settings

from qim.gateway.connection import Connection
from qim.gateway.wire import outbound_frame_cap
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


@dataclass(eq=False)
class LocalRoom:
    key: str
    tenant_id: int
    room_id: str
    members: set[Connection] = field(default_factory=set)
    # Connections whose join is being answered: live events wait here until the reply is out.
    joining: dict[Connection, list[dict[str, Any]]] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    # Members just joined: the room_seq their join reply and hand-over reached. Events up to
    # it may still wait in `pending` (they arrived before or during the join); the next
    # flush leaves those out for them.
    live_after: dict[Connection, int] = field(default_factory=dict)
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
