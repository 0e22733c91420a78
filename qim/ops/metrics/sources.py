"""What apps add to a scrape: each registers a function answering metric families, called at
scrape time on the event loop (qim/hooks.py's pattern: the core names no app)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from qim.hooks import Hook

# Called once per scrape, on the node's event loop: read in-memory state, no I/O.
# Registered by: rooms (writers, ring items, epoch bumps), reactions (REACT batches,
# REACTION_UPDATE frames).
metrics_scraped: Hook[Callable[[], Iterable[Metric]]] = Hook("metrics_scraped")


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    """A one-sample counter family (`name` without `_total`)."""
    return CounterMetricFamily(name, documentation, value=value)


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
