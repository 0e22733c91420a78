"""Rooms in the admin: names and promotions, and what each room is doing now across the
cluster (writer node, online_count, room_epoch; rooms.live). Messages are never persisted."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList

from qim.admin.base import ReadableDatesAdmin
from rooms.live import LiveRoom, get_live_rooms
from rooms.models import Room

NO_ANSWER = "unavailable"


class LiveChangeList(ChangeList):
    """Asks the cluster about the page's rooms in one go, after the page is cut."""

    def get_results(self, request) -> None:  # type: ignore[no-untyped-def]
        super().get_results(request)
        live = get_live_rooms(list(self.result_list))
        for room in self.result_list:
            room.live = live[room.pk]


def live_of(room: Room) -> LiveRoom:
    if not hasattr(room, "live"):  # the detail page: one room
        room.live = get_live_rooms([room])[room.pk]  # type: ignore[attr-defined]
    return room.live  # type: ignore[attr-defined]


@admin.display(description="writer node")
def writer_node(room: Room) -> str:
    live = live_of(room)
    return live.writer_node or ("none (empty)" if live.online_count is not None else NO_ANSWER)


@admin.display(description="online count")
def online_count(room: Room) -> str:
    count = live_of(room).online_count
    return NO_ANSWER if count is None else str(count)


@admin.display(description="room epoch")
def live_epoch(room: Room) -> int:
    """The writer's epoch when there is one (it bumped the durable one when it took the room)."""
    return live_of(room).room_epoch


@admin.display(description="room epoch (stored)")
def stored_epoch(room: Room) -> int:
    """The durable epoch in the database: the last writer's, kept while the room is empty."""
    return room.room_epoch


@admin.register(Room)
class RoomAdmin(ReadableDatesAdmin):
    list_display = ["room_id", "tenant", "title", writer_node, online_count, live_epoch, "promoted_to", "created_at"]
    list_filter = ["tenant", "created_at"]
    search_fields = ["room_id", "title"]
    list_select_related = ["tenant"]
    # Every row asks its writer: keep a page to what one admin request should wait for.
    list_per_page = 50
    fields = ["tenant", "room_id", "title", writer_node, online_count, live_epoch, stored_epoch, "promoted_to",
              "created_at"]
    readonly_fields = [writer_node, online_count, live_epoch, stored_epoch, "promoted_to", "created_at"]

    def get_changelist(self, request, **kwargs):  # type: ignore[no-untyped-def]
        return LiveChangeList

    def get_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        return self.fields if obj is not None else ["tenant", "room_id", "title"]

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        # A room's id and tenant are fixed once it exists (clients and leases key on them).
        fixed = ["tenant", "room_id"] if obj is not None else []
        return [*super().get_readonly_fields(request, obj), *fixed]
