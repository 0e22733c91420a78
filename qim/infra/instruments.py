"""The few counters and histograms that have to be counted where things happen (frames in,
ERRORs, rate-limit refusals, latencies, close codes). Everything the node already counts is
read at scrape time instead (qim/ops/metrics/collector.py), so the hot paths gain one call each.

They live in a registry of their own, not prometheus_client's global one: /metrics shows
exactly QIM's names, all prefixed `qim_`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

P = ParamSpec("P")
R = TypeVar("R")

# No `*_created` series: one more sample per counter and histogram that PromQL's rate() does
# not need (process-wide, and this process exports only these).
disable_created_metrics()
REGISTRY = CollectorRegistry()

# Seconds, from a millisecond to ten: an ACK on an idle node takes a few ms, a loaded one
# hundreds; past 10 s a client has long retried.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Close codes get a label of their own when they are ours or RFC 6455's usual ones; any other
# code a client sends is "other", so a peer cannot grow the label set.
KNOWN_CLOSE_CODES = frozenset(
    {1000, 1001, 1002, 1003, 1005, 1006, 1007, 1008, 1009, 1011, 4401, 4403, 4408, 4429, 4430, 4503}
)

FRAMES_IN = Counter(
    "qim_frames_in", "Frames received and routed, by type (AUTH included).", ["type"], registry=REGISTRY
)
ERRORS = Counter("qim_errors", "ERROR frames sent, by code.", ["code"], registry=REGISTRY)
RATE_LIMITED = Counter(
    "qim_rate_limited", "Hits a rate limit refused, by limit name.", ["limit"], registry=REGISTRY
)
SOCKETS_ACCEPTED = Counter(
    "qim_connections_opened", "WebSocket connections accepted (before AUTH).", registry=REGISTRY
)
SOCKETS_CLOSED = Counter(
    "qim_connections_closed", "WebSocket connections closed, by close code.", ["code"], registry=REGISTRY
)
SEND_LATENCY = Histogram(
    "qim_send_latency_seconds", "SEND frame received to its ACK (or ERROR) written.",
    buckets=LATENCY_BUCKETS, registry=REGISTRY,
)
DB_LATENCY = Histogram(
    "qim_db_transaction_seconds",
    "One database call of a frame handler or batch, timed in its DB thread (its transactions).",
    buckets=LATENCY_BUCKETS, registry=REGISTRY,
)
FANOUT_LATENCY = Histogram(
    "qim_fanout_seconds",
    "Commit to the push's frames written to the sockets of a node it reached (observed on every such node).",
    buckets=LATENCY_BUCKETS, registry=REGISTRY,
)


def _child(metric: Counter, cache: dict[str, Counter], label: str) -> Counter:
    """The labelled child, kept: `labels()` validates and locks on every call, which cost
    a SEND's path several microseconds per counter on a loaded machine."""
    child = cache.get(label)
    if child is None:
        child = cache[label] = metric.labels(label)
    return child


_frames_in: dict[str, Counter] = {}
_errors: dict[str, Counter] = {}
_rate_limited: dict[str, Counter] = {}


def count_frame_in(frame_type: str, amount: int = 1) -> None:
    """`frame_type` must be a routed type (bounded), never a client's arbitrary string."""
    _child(FRAMES_IN, _frames_in, frame_type).inc(amount)


def count_error(code: str, amount: int = 1) -> None:
    _child(ERRORS, _errors, code).inc(amount)


def count_rate_limited(limit_name: str, amount: int = 1) -> None:
    _child(RATE_LIMITED, _rate_limited, limit_name).inc(amount)


def count_socket_accepted() -> None:
    SOCKETS_ACCEPTED.inc()


_closed: dict[str, Counter] = {}


def count_socket_closed(code: int | None, amount: int = 1) -> None:
    label = str(code) if code in KNOWN_CLOSE_CODES else ("none" if code is None else "other")
    _child(SOCKETS_CLOSED, _closed, label).inc(amount)


def frame_handled(frame_type: str, started: float) -> None:
    """A routed frame's reply was written: SEND's time from receipt to ACK (or ERROR)."""
    if frame_type == "SEND":
        SEND_LATENCY.observe(time.perf_counter() - started)


def fanout_done(committed_at: float | None) -> None:
    """A push committed at `committed_at` (wall clock, time.time(): the batch crosses nodes,
    so the nodes' clocks must agree as NTP keeps them) was written to this node's sockets."""
    if committed_at is not None:
        FANOUT_LATENCY.observe(max(0.0, time.time() - committed_at))


def timed_db(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` (run in a DB thread) with its duration observed as qim_db_transaction_seconds:
    timed inside the thread, so a wait for a free thread is not counted as database time."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            DB_LATENCY.observe(time.perf_counter() - started)

    return run
