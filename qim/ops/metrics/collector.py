"""The scrape-time collector: reads what the ConnectionNode already counts (the counters behind
GET /api/v1/node) and what apps register (qim/ops/metrics/sources.py), so no hot path pays for a
metric it already keeps."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from qim.gateway.dispatch import registered_types
from qim.gateway.errors import ERROR_CODES
from qim.node.connection_node import get_node
from qim.infra import instruments
from qim.infra.instruments import REGISTRY
from qim.ops.metrics.sources import counter, gauge, metrics_scraped
from qim.server.catalog import REPLACEMENTS
from qim.server.tuning import STATE as TUNING

logger = logging.getLogger(__name__)

# Node counter -> (metric name without _total, help). Absent counters read 0, so every name
# is on every scrape (a dashboard's query never finds nothing).
NODE_COUNTERS = {
    "connections_opened": ("qim_connections_authenticated", "Connections that passed AUTH."),
    "layer_messages_sent": (
        "qim_node_messages_sent", "Channel-layer messages to other nodes (batches, calls, replies)."
    ),
    "layer_messages_received": ("qim_node_messages_received", "Channel-layer messages this node received."),
    "layer_messages_dropped": (
        "qim_channel_full", "Channel-layer messages dropped because the receiving node's channel was full."
    ),
    "slow_sockets_closed": ("qim_slow_sockets_closed", "Sockets closed 4429 for not reading their pushes."),
    "flooding_sockets_closed": ("qim_flooding_sockets_closed", "Sockets closed 4430 for flooding."),
    "redis_unavailable_replies": (
        "qim_redis_unavailable_replies", "ERROR unavailable answered because Redis was unreachable."
    ),
    "presence_reconciled": ("qim_presence_reconciled", "PRESENCE notices corrected by the heartbeat."),
}
# The limits whose refusals are counted (qim/infra/ratelimit.py, the inbound budget, room writers).
KNOWN_LIMITS = (
    "per_user_msg_rate", "per_user_reaction_rate", "room_msg_rate", "inbound_frame_rate",
    "auth_token_rate_per_account", "auth_token_rate_per_address",
)
# How a frame reaches its socket (qim/server/wire.py): all four are frames out (a held one
# goes out with the other replies to the same read).
FRAMES_WRITTEN = ("frames_written_direct", "frames_written_queued", "frames_written_held", "frames_written_autobahn")


class NodeCollector:
    """This process's ConnectionNode and the apps' sources, read when Prometheus scrapes."""

    def collect(self) -> Iterator[Metric]:
        stats = get_node().stats()
        counters = stats["counters"]
        yield gauge("qim_connections", "Authenticated WebSocket connections open on this node.", stats["connections"])
        yield gauge("qim_online_users", "Users with at least one connection on this node.", stats["online_users"])
        yield counter(
            "qim_frames_out", "Frames written to sockets (replies and pushes).",
            sum(counters.get(name, 0) for name in FRAMES_WRITTEN),
        )
        for key, (name, documentation) in NODE_COUNTERS.items():
            yield counter(name, documentation, counters.get(key, 0))
        yield server_tuning()
        for source in metrics_scraped:
            try:
                yield from source()
            except Exception:  # one app's bug must not cost the operator every other metric
                logger.exception("metrics source %s failed", getattr(source, "__name__", source))


def server_tuning() -> GaugeMetricFamily:
    """1 for each declared replacement of library internals installed on this node, 0 for one
    running stock (QIM_SERVER_TUNING=off, or a version or original that did not verify)."""
    family = GaugeMetricFamily(
        "qim_server_tuning", "Replacements of daphne/autobahn/Twisted internals: 1 installed, 0 stock.", labels=["name"],
    )
    for replacement in REPLACEMENTS:
        family.add_metric([replacement.name], 1 if replacement.name in TUNING.enabled else 0)
    return family


def declare_known_labels() -> None:
    """Every routed frame type, ERROR code, limit and close code at 0 before its first count: a labelled
    counter shows no sample until then, and an alert or a check on `qim_errors_total` must
    find the name on a node that has had no error yet."""
    for frame_type in ("AUTH", *registered_types()):
        instruments.count_frame_in(frame_type, 0)
    for code in ERROR_CODES:
        instruments.count_error(code, 0)
    for name in KNOWN_LIMITS:
        instruments.count_rate_limited(name, 0)
    for close_code in instruments.KNOWN_CLOSE_CODES:
        instruments.count_socket_closed(close_code, 0)


NODE_COLLECTOR = NodeCollector()
REGISTRY.register(NODE_COLLECTOR)
