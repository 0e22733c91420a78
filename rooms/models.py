"""Rooms: only their names and epochs persist; messages live in the writer's ring (§1.2)."""

from __future__ import annotations

from django.db import models

from qim.models import Conversation, Tenant


class Room(models.Model):
    """A chat room. `room_epoch` is durable and grows by one each time a new RoomWriter takes
    the room, so a client can tell "the writer restarted, the ring is gone" from a gap."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rooms")
    room_id = models.CharField(max_length=64)
    title = models.CharField(max_length=200, blank=True)
    room_epoch = models.PositiveIntegerField(default=0)
    promoted_to = models.ForeignKey(Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "room_id"], name="room_unique_per_tenant")]

    def __str__(self) -> str:
        return f"{self.room_id} ({self.tenant})"
