"""Chat rooms: RoomWriter, ring buffer, replay (design §1.2-§1.6). Built by the rooms issue."""

from django.apps import AppConfig


class RoomsConfig(AppConfig):
    name = "rooms"

    def ready(self) -> None:
        from rooms.leases import register_lease_backend

        register_lease_backend()
