"""What a room is doing now, as the cluster sees it, for the admin: the writer's node (from the
lease store every node shares) and the writer's own online_count and room_epoch (the same
`room.info` node call GET rooms/{id} makes), asked for a whole page of rooms at once."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from asgiref.sync import async_to_sync

from qim.errors import Refused
from qim.outage import outage_of
from rooms.models import Room
from rooms.service import get_room_service, room_key

logger = logging.getLogger(__name__)
# An admin page waits this long for a writer, then shows the room as "unavailable" instead of
# waiting out a dead writer's lease the way a client's request does.
LIVE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class LiveRoom:
    writer_node: str | None  # None: no writer now (nobody is in the room), or Redis unreachable
    online_count: int | None  # None: no answer (the writer did not answer in time, or no Redis)
    room_epoch: int


async def live_room(room: Room) -> LiveRoom:
    """The room as its writer sees it; unknown (None, None) while Redis is unreachable, so the
    page still draws during an outage."""
    try:
        return await _ask_writer(room)
    except Exception as exc:
        if outage_of(exc) is None:
            raise
        logger.warning("admin: room %s: Redis unreachable (%s)", room.room_id, type(outage_of(exc)).__name__)
        return LiveRoom(None, None, room.room_epoch)


async def _ask_writer(room: Room) -> LiveRoom:
    service = get_room_service()
    key = room_key(room.tenant_id, room.room_id)
    node_id = await service.writer_node(key, acquire=False)
    if node_id is None:
        return LiveRoom(None, 0, room.room_epoch)
    try:
        info = await asyncio.wait_for(service.call_writer(key, "room.info", {}, acquire=False), LIVE_TIMEOUT_S)
    except (TimeoutError, Refused) as exc:
        logger.info("admin: the writer of room %s on %s did not answer: %s", key, node_id, exc)
        return LiveRoom(node_id, None, room.room_epoch)
    if info is None:  # the writer let go between the two questions
        return LiveRoom(None, 0, room.room_epoch)
    return LiveRoom(node_id, info["online_count"], info["room_epoch"])


async def _live_rooms(rooms: list[Room]) -> list[LiveRoom]:
    return list(await asyncio.gather(*(live_room(room) for room in rooms)))


def get_live_rooms(rooms: list[Room]) -> dict[int, LiveRoom]:
    """Live state by Room pk; called from sync code (an admin view's thread)."""
    if not rooms:
        return {}
    return dict(zip([room.pk for room in rooms], async_to_sync(_live_rooms)(rooms), strict=True))
