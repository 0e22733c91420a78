"""Each connection's inbound frame budget: a token bucket, so one socket cannot make its node
parse and dispatch without bound; a sustained flood closes it (protocol.md §3, close 4430).

Per connection, so in process memory: no Redis round trip on the hot path.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from qim.conf import limit

# Sustained flooding past the budget: closed, the client may reconnect and slow down.
CLOSE_FLOODING = 4430


class _ReqIdOnly(msgspec.Struct):
    req_id: str | None = None


_req_id_decoder = msgspec.json.Decoder(_ReqIdOnly)


def req_id_of(text: str | None) -> str | None:
    """The frame's string req_id, for the refusal to echo (clients match answers by it); a
    skim that builds nothing else, and None for anything malformed."""
    if text is None:
        return None
    try:
        return _req_id_decoder.decode(text).req_id
    except (msgspec.DecodeError, RecursionError):  # msgspec raises the latter past its depth
        return None


@dataclass
class Verdict:
    """What to do with one inbound frame: handle it, refuse it (`retry_after_ms`), or close."""

    allowed: bool
    retry_after_ms: int = 0
    close: bool = False


@dataclass
class InboundBudget:
    """A token bucket of `inbound_frame_burst` frames refilled at `inbound_frame_rate`/s, plus
    a count of refusals per `inbound_flood_window_s` window (past `inbound_flood_max_refused`:
    close). Settings are read once, at the socket's start; `clock` is injectable for tests."""

    clock: Callable[[], float] = time.monotonic
    rate: float = field(default_factory=lambda: float(limit("inbound_frame_rate")))
    burst: float = field(default_factory=lambda: float(limit("inbound_frame_burst")))
    max_refused: float = field(default_factory=lambda: float(limit("inbound_flood_max_refused")))
    window_s: float = field(default_factory=lambda: float(limit("inbound_flood_window_s")))
    tokens: float = -1.0
    updated: float = 0.0
    refused: int = 0
    window_started: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = self.burst
        self.updated = self.window_started = self.clock()

    def take(self) -> Verdict:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return Verdict(True)
        if now - self.window_started >= self.window_s:
            self.window_started, self.refused = now, 0
        self.refused += 1
        wait_ms = math.ceil((1 - self.tokens) / self.rate * 1000) if self.rate > 0 else 1000
        return Verdict(False, retry_after_ms=max(1, wait_ms), close=self.refused > self.max_refused)
