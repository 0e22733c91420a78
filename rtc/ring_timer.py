"""The ring timeout, enforced by the server: a timer per call on the node the invite came in
on, and a sweep on every node that adopts ringing calls whose timer died with its node."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from qim.infra.background import every
from qim.clock import now_ms
from rtc.calls import Call, CallStore

logger = logging.getLogger(__name__)

Expire = Callable[[int, str], Awaitable[None]]


class RingTimers:
    """This node's ring timers and its orphan sweep.

    `expire(tenant_id, call_id)` must be idempotent and safe to run on several nodes at once
    (it ends the call by compare-and-set, so one wins). The timer of the invite's node fires
    at the deadline; the sweep only picks calls `sweep_grace_ms` past theirs, so it acts on
    orphans and not on calls whose timer is about to fire anyway.
    """

    sweep_period_s = 1.0
    sweep_grace_ms = 2000
    sweep_batch = 100

    def __init__(
        self, expire: Expire, store: Callable[[], CallStore], clock: Callable[[], int] = now_ms
    ) -> None:
        self._expire = expire
        self._store = store
        self._clock = clock
        self._timers: dict[tuple[int, str], asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def schedule(self, call: Call) -> None:
        """Fire `expire` for this call at its ring deadline (on this node's loop)."""
        self.ensure_sweeping()
        key = (call.tenant_id, call.call_id)
        task = asyncio.create_task(self._ring(call), name=f"qim-rtc-ring-{call.call_id}")
        self._timers[key] = task
        task.add_done_callback(lambda done: self._timers.pop(key, None) if self._timers.get(key) is done else None)

    def cancel(self, tenant_id: int, call_id: str) -> None:
        """The call left ringing here: drop its timer (never the task running this)."""
        task = self._timers.pop((tenant_id, call_id), None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def ensure_sweeping(self) -> None:
        """Start this node's sweep once; called whenever RTC traffic touches the node."""
        if self._sweeper is None or self._sweeper.done():
            sweep = every(self.sweep_period_s, self._sweep_once, log=logger, failed="ring sweep failed; retrying")
            self._sweeper = asyncio.create_task(sweep, name="qim-rtc-ring-sweep")

    async def _ring(self, call: Call) -> None:
        # Loop: the event loop's clock and the wall clock may disagree by a few ms.
        while (left_ms := call.ring_deadline_ms - self._clock()) > 0:
            await asyncio.sleep(left_ms / 1000)
        try:
            await self._expire(call.tenant_id, call.call_id)
        except Exception:
            logger.exception("ring timeout of call %s failed; the sweep retries", call.call_id)

    async def _sweep_once(self) -> None:
        due = await self._store().due_ringing(self._clock() - self.sweep_grace_ms, self.sweep_batch)
        for tenant_id, call_id in due:
            await self._expire(tenant_id, call_id)
