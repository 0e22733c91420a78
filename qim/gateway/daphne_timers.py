"""Daphne's connection timers, made O(due) instead of O(connections) while sockets idle.

Daphne walks every connection in `application_checker` (each second: reap finished
application instances, forget closed protocols) and in `timeout_checker` (every 2 s:
`check_timeouts`, which sends the keepalive ping, closes past websocket_timeout and rejects a
handshake past websocket_connect_timeout). With 18 000 idle sockets those two walks were most
of the node's idle CPU (docs/performance.md, "Issue 22: density and idle cost"). Here the
application checker visits only the protocols that disconnected or whose application finished
(both say so as they happen), and the timeout checker keeps each protocol in a heap under the
moment its next check is due, so a tick costs what is due, not what is connected. What each
check does is daphne's own `check_timeouts`, unchanged; only when it runs moves (never later
than daphne's 2-second tick would have run it). The checkers themselves are in
qim/gateway/daphne_checks.py, installed by qim/asgi.py.
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from typing import Any

TICK_S = 1.0
# HTTP requests (and anything not a WebSocket): daphne's own period.
OTHER_PERIOD_S = 2.0


def next_check_at(server: Any, protocol: Any, now: float) -> float:
    """When `protocol` next needs daphne's check_timeouts: its ping, its lifetime or its
    handshake deadline, whichever comes first."""
    state = getattr(protocol, "state", None)
    opened = getattr(protocol, "socket_opened", None)
    if state is None or opened is None:
        return now + OTHER_PERIOD_S
    if state == protocol.STATE_CONNECTING:
        return min(opened + server.websocket_connect_timeout, now + OTHER_PERIOD_S)
    if state != protocol.STATE_OPEN:
        return now + OTHER_PERIOD_S
    due = protocol.last_ping + server.ping_interval
    if server.websocket_timeout >= 0:
        due = min(due, opened + server.websocket_timeout)
    return max(due, now)


class ConnectionTimers:
    """The two per-server sets the checkers walk instead of `server.connections`."""

    def __init__(self) -> None:
        self.pending: set[Any] = set()  # disconnected, or its application finished
        # (due, tie-breaker, weak reference): a closed protocol is not kept alive until due.
        self.heap: list[tuple[float, int, weakref.ref]] = []
        self.order = itertools.count()

    def schedule(self, protocol: Any, at: float) -> None:
        heapq.heappush(self.heap, (at, next(self.order), weakref.ref(protocol)))

    def pop_due(self, now: float) -> Any:
        """The next protocol due by `now` (None when none is), popped."""
        while self.heap and self.heap[0][0] <= now:
            protocol = heapq.heappop(self.heap)[2]()
            if protocol is not None:
                return protocol
        return None

    def mark(self, protocol: Any, *_: Any) -> None:
        self.pending.add(protocol)


def timers_of(server: Any) -> ConnectionTimers:
    timers = server.__dict__.get("_qim_timers")
    if timers is None:
        timers = server._qim_timers = ConnectionTimers()
    return timers

