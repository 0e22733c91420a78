"""RoomWriter: the single writer of one room (§1.2), living on the node that holds its lease.

It allocates room_seq = (room_epoch << 48) | counter, appends to the RoomRing, and sends one
merged batch to each ConnectionNode that has online members of the room, and nothing to a
node with none. It knows how many members each node has because nodes report their counts,
and what it handed each node, so a node it learns of late first gets what it missed.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ulid import ULID

from qim.infra.background import spawn
from qim.clock import now_ms
from qim.errors import Refused
from qim.infra.faults import fault_point
from qim.node.fit import fit_list
from qim.infra.instruments import count_rate_limited
from rooms.ring import Replay, RoomRing

# The refusal that makes RoomService.call_writer look for the room's writer again.
NOT_WRITER = "not the room's writer"


class TokenBucket:
    """room_msg_rate on the write side: `rate` per second, bursts of up to `burst`."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self.tokens, self.updated = burst, clock()

    def take(self) -> float:
        """0 when a token was taken, else the seconds until the next one."""
        now = self._clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


@dataclass
class RoomWriter:
    key: str
    room_id: str
    tenant_id: int
    epoch: int
    ring: RoomRing
    bucket: TokenBucket
    # Sends a list of events to one node's ConnectionNode (the node's delivery entry point).
    publish: Callable[[str, dict[str, Any]], Awaitable[None]]
    # The lease value of this writer's tenure (RoomService.writer_node): renewed and released
    # by it, and what the fence compares.
    holder: str = ""
    # Until when the lease is known to be ours (monotonic); past it, nothing is appended.
    lease_valid_until: float = 0.0
    # Asks Redis whether the lease is still ours, before each append: fencing must not rest
    # on this process's clock alone (a lease that vanished with an empty Redis restart, or a
    # process paused past its lease, §1.2). None: only the clock (one process, no Redis).
    fence: Callable[[], Awaitable[bool]] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    # Per node, the place of the report its count came from (RoomService.count_report): one
    # node's reports can arrive out of order (concurrent joins and leaves), and an older one
    # must not undo a newer, or a node with members could be left out of the batches.
    count_orders: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Per node, the newest room_seq of this epoch handed to it (in a batch, or covered by the
    # join reply of its only member). A node counted late (a new writer hears of a node at its
    # next report; an emptied Redis makes a live node look dead for a moment) gets the
    # events it missed, oldest first, in its next batch or at once: else its members missed
    # them with nothing to tell them, when no newer event came to show the gap (the Redis
    # restart fault test, full-w run of 2026-12-04).
    handed: dict[str, int] = field(default_factory=dict)
    # Since when (monotonic) a counted node has been missing from the live nodes (drop_nodes).
    absent_since: dict[str, float] = field(default_factory=dict)
    # When the room last had a member or a message (monotonic): see idle_for().
    last_active: float = field(default_factory=time.monotonic)
    _recent_sends: "OrderedDict[tuple[str, str], dict]" = field(default_factory=OrderedDict)
    # Appended events waiting for their batch, in room_seq order, each with its sender's
    # future. One publisher task sends them: concurrent sends (one task per forwarded
    # ROOM_SEND) each awaiting their own channel-layer send raced in Redis, whose message order
    # is the time each send reached it, and a node got 5 before 3 (§8). It also merges the
    # events appended while a batch was on its way into one batch per node.
    _outbox: list[tuple[dict[str, Any], asyncio.Future[None]]] = field(default_factory=list)
    _publisher: asyncio.Task[None] | None = None
    # A node was counted that this epoch has events for: the publisher runs even without new
    # events, to hand them over.
    _catch_up: bool = False

    def holds_lease(self) -> bool:
        return time.monotonic() < self.lease_valid_until

    def set_count(
        self, node_id: str, count: int, order: tuple[str, int] | None = None, *, covered: int | None = None
    ) -> None:
        """Keep `count` members for `node_id`, unless `order` says a later report is kept.
        `covered`: the node already has the events up to there (a join reply to its only member)."""
        if order is not None:
            if order <= self.count_orders.get(node_id, ("", 0)):
                return
            self.count_orders[node_id] = order
        if count <= 0:
            self.counts.pop(node_id, None)
            return
        newly_counted = node_id not in self.counts
        self.counts[node_id] = count
        if covered is not None:
            self.handed[node_id] = max(self.handed.get(node_id, 0), covered)
        if newly_counted and self.ring.counter and self.handed.get(node_id, 0) < self.ring.latest_room_seq:
            self._catch_up = True
            self._start_publisher()

    def drop_nodes(self, live: set[str], grace_s: float = 0.0) -> None:
        """Forget nodes that died (their connections are gone with them): those missing from
        `live` for `grace_s`. An emptied Redis knows no live node until each one's next
        heartbeat: with no grace, a restart made the writer drop every other node at once."""
        now = time.monotonic()
        for node_id in list(self.counts):
            if node_id in live:
                self.absent_since.pop(node_id, None)
            elif now - self.absent_since.setdefault(node_id, now) >= grace_s:
                del self.counts[node_id]
                self.count_orders.pop(node_id, None)
                self.absent_since.pop(node_id, None)

    @property
    def online_count(self) -> int:
        return sum(self.counts.values())

    def idle_for(self) -> float:
        """Seconds since the room last had a member or a message; 0 while it has a member or
        its ring holds anything to replay (a writer gives up only what is already gone)."""
        now = time.monotonic()
        self.ring.evict()
        if self.online_count or len(self.ring):
            self.last_active = now
        return now - self.last_active

    def head(self) -> dict[str, Any]:
        return {
            "room_id": self.room_id,
            "room_epoch": self.epoch,
            "latest_room_seq": self.ring.latest_room_seq,
            "earliest_replay_room_seq": self.ring.earliest_room_seq,
        }

    def replay(self, after_room_seq: int | None, max_bytes: int | None = None) -> dict[str, Any]:
        """The ROOM_BATCH body answering a join or replay (§8): the oldest events after the
        position whose JSON fits in `max_bytes` (at least one), and `has_more` when newer
        ones did not fit (the client replays again after the last one)."""
        outcome = self.ring.replay(after_room_seq) if after_room_seq is not None else Replay([], False)
        events = outcome.events
        if max_bytes is not None:
            events = fit_list(events, max_bytes).items
        body = {
            **self.head(), "events": events, "replay_truncated": outcome.truncated,
            "has_more": len(events) < len(outcome.events),
        }
        if outcome.reason is not None:
            body["replay_truncated_reason"] = outcome.reason
        return body

    async def send(
        self, *, sender_id: str, content_type: str, payload: Any, client_msg_id: str | None
    ) -> dict[str, Any]:
        """Append one message and fan it out; answers {message_id, room_seq}.

        A retry with the same client_msg_id while the original is still in the ring answers
        the original (the design's dedupe id). Raises Refused("rate_limited").
        """
        await self.check_fence()
        # From here to the outbox nothing awaits: room_seq order is outbox order.
        dedupe_key = (sender_id, client_msg_id) if client_msg_id else None
        if dedupe_key is not None:
            earlier = self._recent_sends.get(dedupe_key)
            earliest = self.ring.earliest_room_seq
            if earlier is not None and earliest is not None and earlier["room_seq"] >= earliest:
                return earlier
        wait_s = self.bucket.take()
        if wait_s:
            count_rate_limited("room_msg_rate")
            raise Refused("rate_limited", "room_msg_rate reached", retry_after_ms=max(1, int(wait_s * 1000)))
        event = {
            "room_seq": self.ring.next_seq(),
            "message_id": str(ULID()),
            "sender_id": sender_id,
            "content_type": content_type,
            "payload": payload,
            "sent_at_ms": now_ms(),
        }
        self.ring.append(event)
        self.last_active = time.monotonic()
        fault_point("room.after_append")
        ack = {"message_id": event["message_id"], "room_seq": event["room_seq"]}
        if dedupe_key is not None:
            self._recent_sends[dedupe_key] = ack
            while len(self._recent_sends) > self.ring.max_items:
                self._recent_sends.popitem(last=False)
        await self._publish_in_order(event)
        return ack

    async def _publish_in_order(self, event: dict[str, Any]) -> None:
        """Queue `event` for its batch and wait until it was handed to every node."""
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._outbox.append((event, sent))
        self._start_publisher()
        await sent

    def _start_publisher(self) -> None:
        if self._publisher is None:
            self._publisher = spawn(self._publish_outbox(), name="qim-room-publisher")

    async def _publish_outbox(self) -> None:
        try:
            while self._outbox or self._catch_up:
                taken, self._outbox = self._outbox, []
                try:
                    await self._broadcast([event for event, _ in taken])
                except Exception as error:
                    for _, sent in taken:
                        if not sent.done():
                            sent.set_exception(error)
                else:
                    for _, sent in taken:
                        if not sent.done():
                            sent.set_result(None)
        finally:
            self._publisher = None

    async def check_fence(self) -> None:
        """Refuse (NOT_WRITER: the caller finds the room's writer again) unless the lease is
        ours by the clock and, when there is a fence, by Redis too. A writer refused here stays
        refused unless the store still has its lease (RoomService._renewed: a stalled loop, in
        one process); otherwise the lease is gone for good, the next writer has epoch + 1."""
        if self.holds_lease() and (self.fence is None or await self.fence()):
            return
        self.lease_valid_until = 0.0
        raise Refused("conflict", NOT_WRITER)

    async def _broadcast(self, events: list[dict[str, Any]]) -> None:
        """`events` to every node with members, each behind what that node missed, if any."""
        self._catch_up = False
        message = {
            "room": self.key,
            "tenant": self.tenant_id,
            "room_id": self.room_id,
            "room_epoch": self.epoch,
            "events": events,
            "latest_room_seq": self.ring.latest_room_seq,
            "earliest_replay_room_seq": self.ring.earliest_room_seq,
        }
        first = events[0]["room_seq"] if events else self.ring.latest_room_seq + 1
        for node_id in [n for n, count in self.counts.items() if count > 0]:
            missed = self._missed(node_id, first)
            if not missed and not events:
                continue
            await self.publish(node_id, {**message, "events": missed + events} if missed else message)
            self.handed[node_id] = max(self.handed.get(node_id, 0), (events or missed)[-1]["room_seq"])

    def _missed(self, node_id: str, first: int) -> list[dict[str, Any]]:
        """The events before `first` that the ring holds and `node_id` was never handed."""
        handed = self.handed.get(node_id, 0)
        if handed >= first - 1:
            return []
        return self.ring.between(handed, first)
