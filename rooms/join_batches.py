"""ROOM_JOINs of one room on this node coalesced into one writer call per burst (issue 22:
10 000 receivers joining across two nodes).

Alone, each join costs a lease lookup, a node call over Redis and the writer's fence check;
in a storm those calls queue behind each other until some time out ("writer unavailable;
retry"). Here the first join of a room goes at once, alone (no added latency); joins that
arrive while a call for the room is in flight wait and go together in the next call, which
the writer answers with one reply per join (its own `after` and size budget). Every join of
a call began before the call was sent, so its join buffer holds every live event newer than
its reply, exactly as when it went alone.
"""

from __future__ import annotations

from typing import Any

from qim.batching import KeyedBatcher
from rooms.service import RoomService

# Joins per writer call: bounds one reply message (each replay is cut to its own budget).
MAX_JOINS_PER_CALL = 256

Join = tuple[int | None, int | None]  # (after_room_seq, max_bytes)


class JoinBatches:
    """Per node, on the event loop: at most one writer call per room in flight (the
    process's KeyedBatcher, its apply a node call; counters room_join_requests and
    room_join_batches)."""

    def __init__(self, service: RoomService) -> None:
        self.service = service
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
        if len(joins) == 1:  # the op a join alone always used (nodes of an older release know it)
            (after, max_bytes), = joins
            body = await service.call_writer(key, "room.join", {**report, "after": after, "max_bytes": max_bytes})
            return [body]  # type: ignore[list-item]
        answer = await service.call_writer(key, "room.join_many", {**report, "joins": [list(j) for j in joins]})
        assert answer is not None  # acquire=True: there is always a writer
        return [{**reply, "online_count": answer["online_count"]} for reply in answer["replies"]]


_batches: JoinBatches | None = None


def get_join_batches(service: RoomService) -> JoinBatches:
    global _batches
    if _batches is None or _batches.service is not service:
        _batches = JoinBatches(service)
    return _batches
