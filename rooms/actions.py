"""Writes of rooms: creating one, and promoting one to a persistent group (§1.6)."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from qim.actions.conversations import do_create_group
from qim.errors import Refused
from qim.models import Conversation, User
from rooms.models import Room


def do_create_room(creator: User, room_id: str, title: str) -> Room:
    """A new room of the creator's tenant; `conflict` when the id is taken there."""
    try:
        with transaction.atomic():
            return Room.objects.create(tenant_id=creator.tenant_id, room_id=room_id, title=title)
    except IntegrityError:
        raise Refused("conflict", f"room {room_id!r} already exists") from None


def do_promote_room(room: Room, user_ids: list[str]) -> Conversation:
    """A group conversation with these members, all joined_at = 0, so its seqs start at 1 and
    no room message enters its history (§14.4). The room itself lives on."""
    users = list(User.objects.filter(tenant_id=room.tenant_id, username__in=user_ids))
    missing = set(user_ids) - {u.username for u in users}
    if missing:
        raise Refused("not_found", f"no such user: {sorted(missing)[0]}")
    if not users:
        raise Refused("bad_request", "a promoted group needs at least one member")
    with transaction.atomic():
        conversation = do_create_group(room.tenant_id, room.title or room.room_id, [u.pk for u in users])
        room.promoted_to = conversation
        room.save(update_fields=["promoted_to"])
    return conversation
