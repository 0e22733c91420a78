"""Daphne's connection timers, made O(due) instead of O(connections) while sockets idle.

Daphne walks every connection in `application_checker` (each second: reap finished
application instances, forget closed protocols) and in `timeout_checker` (every 2 s:
`check_timeouts`, which sends the keepalive ping, closes past websocket_timeout and rejects a
handshake past websocket_connect_timeout). With 18 000 idle sockets those two walks were most
of the node's idle CPU (docs/performance.md,
"Idle cost: the timing wheel and the kernel's TCP keepalive"). Here the application checker
visits only the protocols that disconnected or whose application finished (both say so as they
happen), and the timeout checker files each protocol in a timing wheel under the second its
next check falls due, so a tick costs what is due, not what is connected. What each check does
is daphne's own `check_timeouts`, unchanged; only when it runs moves (never later than daphne's
2-second tick would have run it). The checkers themselves are in qim/server/daphne_checks.py,
installed by qim/asgi.py.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

TICK_S = 1.0
# HTTP requests (and anything not a WebSocket): daphne's own period.
OTHER_PERIOD_S = 2.0
# Set on a protocol whose keepalive the kernel sends (qim/server/heartbeat.py): no keepalive
# check is due for it, only its lifetime.
BY_KERNEL = "_qim_keepalive_by_kernel"
# How far ahead such a protocol is filed when it has no lifetime (websocket_timeout < 0).
NO_LIFETIME_PERIOD_S = 3600.0


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
    if protocol.__dict__.get(BY_KERNEL):
        due = now + NO_LIFETIME_PERIOD_S
    else:
        due = protocol.last_ping + server.ping_interval
    if server.websocket_timeout >= 0:
        due = min(due, opened + server.websocket_timeout)
    return max(due, now)


class ConnectionTimers:
    """The two per-server sets the checkers walk instead of `server.connections`.

    The due checks are a timing wheel of 1 s slots, not a heap: a protocol is filed (a weak
    reference appended to a list, so a closed one is not kept alive) under the first whole
    second at or after its due moment, and a tick takes every slot up to now. Nothing is filed
    per frame: activity only moves `last_ping`, and the slot's check files the protocol again
    under its new due moment. A tick of 720 due sockets (18 000 at 25 s) then costs list
    appends, not 720 heap pops and pushes
    (docs/performance.md, "Idle cost: the timing wheel and the kernel's TCP keepalive")."""

    def __init__(self) -> None:
        self.pending: set[Any] = set()  # disconnected, or its application finished
        self.slots: dict[int, list[weakref.ref]] = {}

    def schedule(self, protocol: Any, at: float) -> None:
        entries = self.slots.get(slot := math.ceil(at))
        if entries is None:
            self.slots[slot] = [weakref.ref(protocol)]
        else:
            entries.append(weakref.ref(protocol))

    def take_due(self, now: float) -> list[weakref.ref]:
        """Every entry filed under a slot up to `now`, those slots emptied (never early: a
        slot is the whole second at or after each of its entries' due moments). The slots
        are looked up by key, not walked second by second, so a filing into a second already
        past (a slow tick) or a wall clock that jumped either way is taken at the next tick
        like any other; the keys are the distinct due seconds, about the interval's count."""
        last = math.floor(now)
        due: list[weakref.ref] = []
        for slot in [slot for slot in self.slots if slot <= last]:
            due.extend(self.slots.pop(slot))
        return due

    def mark(self, protocol: Any, *_: Any) -> None:
        self.pending.add(protocol)


def timers_of(server: Any) -> ConnectionTimers:
    timers = server.__dict__.get("_qim_timers")
    if timers is None:
        timers = server._qim_timers = ConnectionTimers()
    return timers

