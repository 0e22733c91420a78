"""The node's collector freezes what each middle or full pass leaves alive, and thaws it all for
one full pass on a slow period, or once the frozen heap has grown by a factor.

Why: after a join storm a node holds a few hundred thousand long-lived objects (each socket's
protocol, consumer and room membership); a middle pass over what eleven young passes kept
stopped a 5 000-socket node for 140-220 ms of CPU, often inside the next messages' delivery, and
more frequent middle passes alone only moved the survivors on to the old generation's full
passes (docs/performance.md, "The collector: freeze and thresholds"). Frozen, they are scanned
again only by a thaw. Young passes do not freeze: a handshake's cycles that outlive one young
pass are still found by the next middle pass.

What it costs: nothing for a live object (reference counting still frees acyclic garbage at
once), but a cycle that becomes garbage while frozen (a closed connection's, a handshake's that
outlived a middle pass) waits for the next thaw: bounded by `growth` times the heap after the
last thaw, and by `period_s` in time. That memory, and a thaw's full pass in a reconnect storm,
are why QIM_GC_FREEZE is off by default (docs/performance.md, "The collector: freeze and thresholds").
"""

from __future__ import annotations

import gc
import threading
from typing import Any

# On the period, a thaw runs only if the frozen set moved (objects frozen, plus frozen objects
# freed: a closed connection frees most of its objects and leaves its cycles) by more than this
# share of what the last thaw left: an idle node skips a full pass that would find next to
# nothing at the cost of a pause of every socket.
IDLE_SHARE = 0.01


class CollectorFreezer:
    """Installed once per node process (qim/asgi.py). `thaw` may also be called directly."""

    def __init__(self, period_s: float, growth: float) -> None:
        self.period_s = period_s
        self.growth = growth
        self.thaws = 0
        self.last_thaw_found = 0
        self.thaws_found = 0
        self._thawing = False
        self._lock = threading.Lock()
        self._due = threading.Event()
        self._settled()

    def install(self) -> None:
        """Freeze what start-up left, hook the collector, start the thawing thread."""
        gc.freeze()
        self._settled()
        gc.callbacks.append(self._on_pass)
        threading.Thread(target=self._run, name="qim-gc-thaw", daemon=True).start()

    def _settled(self) -> None:
        """The baseline after a thaw (or the start-up freeze): what is frozen now, the count that
        makes the next thaw due, and nothing moved since."""
        self._after_thaw = self._frozen = gc.get_freeze_count()  # _frozen: after the last freeze
        self._limit = int(self._after_thaw * (1.0 + self.growth))
        self._moved = 0  # frozen and freed since the last thaw

    def _on_pass(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collector, in whichever thread allocated: only list moves here. Not
        # after a young pass: what survived one young pass includes cycles about to become
        # garbage (a handshake's), which the next middle pass still finds.
        if phase != "stop" or self._thawing or info["generation"] == 0:
            return
        before = gc.get_freeze_count()
        gc.freeze()
        frozen = gc.get_freeze_count()
        self._moved += abs(self._frozen - before) + frozen - before
        self._frozen = frozen
        if frozen > self._limit:
            self._due.set()

    def _run(self) -> None:
        while True:
            grown = self._due.wait(timeout=self.period_s)
            self._due.clear()
            moved = self._moved + abs(gc.get_freeze_count() - self._frozen)
            if grown or moved > self._after_thaw * IDLE_SHARE:
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
            self._settled()
            self.thaws += 1
            self.last_thaw_found = found
            self.thaws_found += found
        return found

    def stats(self) -> dict[str, Any]:
        return {"gc_frozen": gc.get_freeze_count(), "gc_thaws": self.thaws,
                "gc_last_thaw_found": self.last_thaw_found, "gc_thaws_found": self.thaws_found}


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
