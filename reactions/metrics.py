"""The reactions' part of a /metrics scrape (qim/ops/metrics/sources.py): REACT batches (one
transaction each) and REACTION_UPDATE frames handed to the fan-out."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from qim.node.connection_node import get_node
from qim.ops.metrics.sources import counter
from reactions.pusher import current_pusher


def reaction_metrics() -> Iterator[Metric]:
    counters = get_node().counters
    pusher = current_pusher()
    sent = pusher.frames_sent if pusher is not None else 0
    yield counter(
        "qim_react_batches", "REACT batches run (one transaction each, qim/gateway/batching.py).", counters["react_batches"]
    )
    yield counter("qim_reaction_updates", "REACTION_UPDATE frames built and handed to the fan-out.", sent)
