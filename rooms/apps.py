"""Chat rooms: RoomWriter, ring buffer, replay (design §1.2-§1.6). Built by the rooms issue."""

from django.apps import AppConfig


class RoomsConfig(AppConfig):
    name = "rooms"

    def ready(self) -> None:
        # Writers held, ring items and epoch bumps on /metrics (qim/ops/metrics/sources.py).
        from qim.ops.metrics.sources import metrics_scraped
        from rooms.metrics import room_metrics

        metrics_scraped.register(room_metrics)
        from rooms.leases import register_lease_backend

        register_lease_backend()
