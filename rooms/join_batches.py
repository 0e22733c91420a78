"""ROOM_JOINs of one room on this node coalesced into one writer call per burst (issue 22:
10 000 receivers joining across two nodes).

Alone, each join costs a lease lookup, a node call over Redis and the writer's fence check;
in a storm those calls queue behind each other until some time out ("writer unavailable;
retry"). Here the first join of a room goes at once, alone (no added latency); joins that
arrive while a call for the room is in flight wait and go together in the next call, which
the writer answers with one reply per join (its own `after` and size budget). Every join of
a call began before the call was sent, so its join buffer holds every live event newer than
its reply, exactly as when it went alone. A writer of an older release, without the batched
op, gets the burst as single joins (and so does every burst to it for a while after).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from qim.gateway.batching import KeyedBatcher
from qim.errors import Refused
from qim.node.node_calls import UNKNOWN_OP
from rooms.service import RoomService

logger = logging.getLogger(__name__)

# Joins per writer call: bounds one reply message (each replay is cut to its own budget).
MAX_JOINS_PER_CALL = 256
# How long a writer that answered it lacks room.join_many gets single joins without being
# asked again (a rolling upgrade replaces it meanwhile; a storm pays for the refusal once).
OLD_WRITER_S = 300.0

Join = tuple[int | None, int | None]  # (after_room_seq, max_bytes)


class JoinBatches:
    """Per node, on the event loop: at most one writer call per room in flight (the
    process's KeyedBatcher, its apply a node call; counters room_join_requests and
    room_join_batches)."""

    def __init__(self, service: RoomService) -> None:
        self.service = service
        self._old_writers: dict[str, float] = {}  # node id -> until (monotonic)
        self._batcher: KeyedBatcher[str, Join, dict[str, Any]] = KeyedBatcher(
            "room_join", self._call, max_items=MAX_JOINS_PER_CALL, on_loop=True
        )

    async def join(self, key: str, after: int | None, max_bytes: int | None) -> dict[str, Any]:
        """The writer's answer to this join (a ROOM_BATCH body with online_count); raises
        the writer's Refused as a join alone would."""
        return await self._batcher.submit(key, (after, max_bytes))

    async def _call(self, key: str, joins: list[Join]) -> list[dict[str, Any]]:
        service = self.service
        report = service.count_report(service.local.rooms.get(key))
        if len(joins) > 1 and not await self._writer_is_old(key):
            try:
                answer = await service.call_writer(key, "room.join_many", {**report, "joins": [list(j) for j in joins]})
            except Refused as refused:
                if not without_join_many(refused):
                    raise
                await self._remember_old_writer(key)
            else:
                assert answer is not None  # acquire=True: there is always a writer
                return [{**reply, "online_count": answer["online_count"]} for reply in answer["replies"]]
        # The op a join alone always used (nodes of an older release know it): one call each.
        return list(await asyncio.gather(*(
            service.call_writer(key, "room.join", {**report, "after": after, "max_bytes": max_bytes})
            for after, max_bytes in joins
        )))  # type: ignore[arg-type]

    async def _writer_is_old(self, key: str) -> bool:
        """Whether the room's writer is a node remembered as lacking room.join_many (asked of
        Redis only while some node is remembered: during a rolling upgrade)."""
        now = time.monotonic()
        self._old_writers = {node: until for node, until in self._old_writers.items() if until > now}
        if not self._old_writers:
            return False
        return await self.service.writer_node(key, acquire=True) in self._old_writers

    async def _remember_old_writer(self, key: str) -> None:
        node_id = await self.service.writer_node(key, acquire=False)
        if node_id is not None:
            logger.warning("room writer %s does not run room.join_many: single joins for %.0f s", node_id, OLD_WRITER_S)
            self._old_writers[node_id] = time.monotonic() + OLD_WRITER_S
        self.service.node.counters["room_join_single_fallbacks"] += 1


def without_join_many(refused: Refused) -> bool:
    """The writer answered that it does not run room.join_many: `unknown_op` from this
    release on, `internal` "room.join_many failed on <node>" from older ones (which is also
    what a join_many that failed there says; single joins are then the safe way too)."""
    if refused.code == UNKNOWN_OP:
        return True
    return refused.code == "internal" and refused.message.startswith("room.join_many failed on ")


_batches: JoinBatches | None = None


def get_join_batches(service: RoomService) -> JoinBatches:
    global _batches
    if _batches is None or _batches.service is not service:
        _batches = JoinBatches(service)
    return _batches
