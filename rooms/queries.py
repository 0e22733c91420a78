"""Reads of rooms; `access_room` hides other tenants' rooms as not found."""

from __future__ import annotations

from django.db.models import Q

from qim.errors import Refused
from rooms.models import Room


def access_room(tenant_id: int, room_id: str) -> Room:
    room = Room.objects.filter(tenant_id=tenant_id, room_id=room_id).first()
    if room is None:
        raise Refused("not_found", f"no room {room_id!r}")
    return room


def existing_rooms(keys: list[tuple[int, str]]) -> set[tuple[int, str]]:
    """Which of these (tenant pk, room_id) exist, with one query for them all."""
    by_tenant: dict[int, set[str]] = {}
    for tenant_id, room_id in keys:
        by_tenant.setdefault(tenant_id, set()).add(room_id)
    where = Q()
    for tenant_id, room_ids in by_tenant.items():
        where |= Q(tenant_id=tenant_id, room_id__in=room_ids)
    return set(Room.objects.filter(where).values_list("tenant_id", "room_id"))
