"""The node's collector freezes what each of its passes leaves alive, so the next passes scan
only what is newer, and thaws it all for one full pass on a slow period or once the frozen heap
has grown by a factor, so cyclic garbage of connections that closed meanwhile is still found.

Why: after a join storm a node holds a few hundred thousand long-lived objects (one socket's
protocol, consumer and room membership each), and a middle pass that scans them all stopped a
5 000-socket node for 140-220 ms of CPU, often inside the next messages' delivery
(docs/performance.md, "Issue 22: per-frame cost and big rooms"). Frozen, they are scanned again
only by the thaw's full pass. What a frozen object costs: nothing while it is alive (reference
counting still frees acyclic garbage at once); a cycle that becomes garbage while frozen waits
for the next thaw, so garbage is bounded by `growth` times the heap after the last thaw, and
by `period_s` in time.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

# On the period, a thaw runs only if the frozen count moved by more than this share of what the
# last thaw left: an idle node (a few keepalive objects frozen now and then) skips a full pass
# that would find next to nothing at the cost of a pause of every socket.
IDLE_SHARE = 0.01


class CollectorFreezer:
    """Installed once per node process (qim/asgi.py). `thaw` may also be called directly."""

    def __init__(self, period_s: float, growth: float) -> None:
        self.period_s = period_s
        self.growth = growth
        self.thaws = 0
        self.last_thaw_found = 0
        self._thawing = False
        self._lock = threading.Lock()
        self._due = threading.Event()
        self._after_thaw = gc.get_freeze_count()
        self._limit = self._limit_after(self._after_thaw)

    def install(self) -> None:
        """Freeze what start-up left, hook the collector, start the thawing thread."""
        gc.freeze()
        self._after_thaw = gc.get_freeze_count()
        self._limit = self._limit_after(self._after_thaw)
        gc.callbacks.append(self._on_pass)
        threading.Thread(target=self._run, name="qim-gc-thaw", daemon=True).start()

    def _limit_after(self, frozen: int) -> int:
        return int(frozen * (1.0 + self.growth))

    def _on_pass(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collector, in whichever thread allocated: only list moves here.
        if phase != "stop" or self._thawing:
            return
        gc.freeze()
        if gc.get_freeze_count() > self._limit:
            self._due.set()

    def _run(self) -> None:
        while True:
            grown = self._due.wait(timeout=self.period_s)
            self._due.clear()
            if grown or abs(gc.get_freeze_count() - self._after_thaw) > self._after_thaw * IDLE_SHARE:
                self.thaw()

    def thaw(self) -> int:
        """One full pass over everything, then freeze what survived; answers what it found."""
        with self._lock:
            self._thawing = True
            try:
                gc.unfreeze()
                found = gc.collect()
            finally:
                gc.freeze()
                self._thawing = False
            self._after_thaw = gc.get_freeze_count()
            self._limit = self._limit_after(self._after_thaw)
            self.thaws += 1
            self.last_thaw_found = found
        return found

    def stats(self) -> dict[str, Any]:
        return {"gc_frozen": gc.get_freeze_count(), "gc_thaws": self.thaws,
                "gc_last_thaw_found": self.last_thaw_found}


_installed: CollectorFreezer | None = None


def install(period_s: float, growth: float) -> CollectorFreezer:
    global _installed
    if _installed is None:
        _installed = CollectorFreezer(period_s, growth)
        _installed.install()
    return _installed


def stats() -> dict[str, Any]:
    """For GET /api/v1/node: the frozen count always, the thaws when the freezer runs."""
    if _installed is None:
        return {"gc_frozen": gc.get_freeze_count()}
    return _installed.stats()
