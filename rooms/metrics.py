"""The rooms' part of a /metrics scrape (qim/ops/metrics/sources.py): writers held, ring items,
members here, epoch bumps, read from this node's RoomService when it has one."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from qim.node.connection_node import get_node
from qim.ops.metrics.sources import counter, gauge
from rooms.service import current_room_service


def room_metrics() -> Iterator[Metric]:
    service = current_room_service()
    writers = list(service.writers.values()) if service is not None else []
    local = list(service.local.rooms.values()) if service is not None else []
    counters = get_node().counters
    held = sum(1 for w in writers if w.holds_lease())
    yield gauge("qim_room_writers", "Rooms whose RoomWriter (and lease) this node holds.", held)
    yield gauge("qim_room_ring_items", "Events held in this node's RoomRings.", sum(len(w.ring) for w in writers))
    yield gauge("qim_rooms_joined", "Rooms with members connected to this node.", sum(1 for r in local if r.count))
    yield gauge("qim_room_members", "Room memberships of sockets on this node.", sum(r.count for r in local))
    yield counter(
        "qim_room_epoch_bumps", "room_epoch bumps: this node became a room's writer.", counters["room_epoch_bumps"]
    )
    yield counter("qim_room_writers_retired", "Idle room writers this node gave up.", counters["room_writers_retired"])
    yield counter(
        "qim_room_stale_batches_dropped", "Room batches of an older epoch dropped (fencing).",
        counters["room_stale_batches_dropped"],
    )
