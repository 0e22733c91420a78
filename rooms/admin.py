"""Rooms in the admin: names, epochs and promotions (messages are never persisted)."""

from django.contrib import admin

from rooms.models import Room


@admin.register(Room)
class RoomAdmin(admin.ModelAdmin):
    list_display = ["room_id", "tenant", "title", "room_epoch", "promoted_to", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["room_id", "title"]
    readonly_fields = ["room_epoch", "promoted_to", "created_at"]
