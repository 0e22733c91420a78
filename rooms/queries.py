"""Reads of rooms; `access_room` hides other tenants' rooms as not found."""

from __future__ import annotations

from qim.errors import Refused
from rooms.models import Room


def access_room(tenant_id: int, room_id: str) -> Room:
    room = Room.objects.filter(tenant_id=tenant_id, room_id=room_id).first()
    if room is None:
        raise Refused("not_found", f"no room {room_id!r}")
    return room
