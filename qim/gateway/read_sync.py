"""The ReadSyncFlusher: this node's timer for the merge windows its MARK_READs opened, and a
sweep that flushes every due pending read sync in the database, including those a dead node
left behind (design §2, C-4). The writes themselves are qim.actions.read_sync's."""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable

from qim.actions.read_sync import flush_due_read_syncs
from qim.infra.background import every, spawn
from qim.clock import now_ms
from qim.conf import limit
from qim.gateway.db import in_db_thread

logger = logging.getLogger(__name__)

# Fire a little after the due time: the wall clock of the row and the loop's clock differ.
TIMER_SLACK_S = 0.02


class ReadSyncFlusher:
    """One per process. `clock` is an attribute so tests can swap it."""

    def __init__(self, clock: Callable[[], int] = now_ms) -> None:
        self.clock = clock
        self._due: list[int] = []  # a heap of due times of windows opened here
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def sweep_period_s(self) -> float:
        return min(5.0, max(0.5, float(limit("read_sync_merge_window_s"))))

    def schedule(self, due_at_ms: int) -> None:
        """Flush when a window this node opened closes (call from the event loop)."""
        heapq.heappush(self._due, due_at_ms)
        self._arm()

    def start_sweeping(self) -> None:
        if self._sweeper is None:
            sweep = every(self.sweep_period_s, in_db_thread(flush_due_read_syncs), log=logger, failed="read sync sweep failed")
            self._sweeper = asyncio.create_task(sweep, name="qim-read-sync-sweep")

    def _arm(self) -> None:
        if not self._due:
            return
        earliest = self._due[0]
        if self._timer is not None and self._timer_at is not None and self._timer_at <= earliest:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, (earliest - self.clock()) / 1000) + TIMER_SLACK_S
        self._timer_at = earliest
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        spawn(self._flush_due(), name="qim-read-sync-flush")

    async def _flush_due(self) -> None:
        now = self.clock()
        while self._due and self._due[0] <= now:
            heapq.heappop(self._due)
        try:
            await in_db_thread(flush_due_read_syncs)(now)
        except Exception:
            # The rows stay; the sweep (here or on any node) writes them later.
            logger.exception("flushing due read syncs failed")
        self._arm()


_flusher: ReadSyncFlusher | None = None


def get_read_sync_flusher() -> ReadSyncFlusher:
    global _flusher
    if _flusher is None:
        _flusher = ReadSyncFlusher()
    return _flusher
