"""What a room is doing now, as the cluster sees it, for the admin: the writer's node (from the
lease store every node shares: one MGET per page) and the writer's own online_count and
room_epoch (the same `room.info` node call GET rooms/{id} makes), all writers asked at once."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from asgiref.sync import async_to_sync

from qim.errors import Refused
from qim.infra.outage import outage_of
from rooms.models import Room
from rooms.leases import node_of
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


async def _live_rooms(rooms: list[Room]) -> list[LiveRoom]:
    """One MGET for the page's lease holders, then every writer asked at once."""
    service = get_room_service()
    keys = [room_key(room.tenant_id, room.room_id) for room in rooms]
    try:
        holders = await service.leases.holders(keys)
    except Exception as exc:
        if outage_of(exc) is None:
            raise
        # The page still draws during an outage: what only Redis knows shows as unknown.
        logger.warning("admin: rooms page: Redis unreachable (%s)", type(outage_of(exc)).__name__)
        return [LiveRoom(None, None, room.room_epoch) for room in rooms]
    asks = (_ask_writer(key, holder, room) for key, holder, room in zip(keys, holders, rooms, strict=True))
    return list(await asyncio.gather(*asks))


async def _ask_writer(key: str, holder: str | None, room: Room) -> LiveRoom:
    """The `room.info` node call GET rooms/{id} makes, sent straight to the lease holder's node
    once, with a short timeout (no waiting out a dead writer's lease as clients do)."""
    if holder is None:
        return LiveRoom(None, 0, room.room_epoch)
    node_id = node_of(holder)
    try:
        info = await get_room_service().node.call(node_id, "room.info", {"key": key}, timeout=LIVE_TIMEOUT_S)
    except (TimeoutError, Refused) as exc:  # Refused: it let the room go since the MGET
        logger.info("admin: the writer of room %s on %s did not answer: %s", key, node_id, exc)
        return LiveRoom(node_id, None, room.room_epoch)
    except Exception as exc:
        if outage_of(exc) is None:
            raise
        return LiveRoom(node_id, None, room.room_epoch)
    return LiveRoom(node_id, info["online_count"], info["room_epoch"])


def get_live_rooms(rooms: list[Room]) -> dict[int, LiveRoom]:
    """Live state by Room pk; called from sync code (an admin view's thread)."""
    if not rooms:
        return {}
    return dict(zip([room.pk for room in rooms], async_to_sync(_live_rooms)(rooms), strict=True))
