"""A KeyedBatcher whose next batch of a key starts while the one before still runs (issue
#22, SEND batches).

One batch at a time makes each batch's whole chain (its reads, BEGIN, the lock, the writes,
the commit, the thread hops) the key's critical path. Here at most two batches of a key are
in flight: the second starts once the first has written (qim.turns: its hand-over, just
before its commit), gathering the SENDs that arrived until then; it does its reads, sends
BEGIN and takes the lock while the first commits, answers and pushes, so its lock waits
only for the first's commit, and rows keep the order the batches started in. Results and pushes go out in batch
order: a batch delivers its pushes only after the batch before it has delivered its own.
`apply` must call qim.turns.wait_for_turn before its lock and hand_over_turn after its
writes; the turn is handed over anyway when `apply` ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from qim.batching import KeyedBatcher
from qim.db import in_db_thread_collected
from qim.errors import Refused
from qim.notify import deliver_all
from qim.turns import Turn, taking

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

IN_FLIGHT = 2  # per key: one writing, one reading and queued on the lock


class OverlappingBatcher(KeyedBatcher[K, T, R]):
    def __init__(self, name: str, apply: Callable[[K, list[T]], Sequence[R | Refused]], *, max_items: int = 64) -> None:
        super().__init__(name, apply, max_items=max_items)
        self._collect = in_db_thread_collected(apply)
        # per key: the batches in flight, oldest first, each with its turn
        self._flights: dict[K, list[tuple[asyncio.Task[None], Turn]]] = {}

    async def submit(self, key: K, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((item, future))
        self._count("requests")
        self._start_next(key)
        return await future

    def _start_next(self, key: K) -> None:
        flights = self._flights.setdefault(key, [])
        busy = len(flights) >= IN_FLIGHT or (flights and not flights[-1][1].handed_over)
        if busy or not (waiting := self._waiting.pop(key, None)):
            if not flights:
                del self._flights[key]
            return
        if len(waiting) > self.max_items:
            waiting, self._waiting[key] = waiting[: self.max_items], waiting[self.max_items :]
        before = flights[-1] if flights else None
        if before is not None:
            self._count("overlapped")  # started while the one before still commits or answers
        loop = asyncio.get_running_loop()
        turn = Turn(before[1] if before else None, lambda: loop.call_soon_threadsafe(self._start_next, key))
        task = asyncio.create_task(self._run_after(key, waiting, turn, before[0] if before else None))
        flights.append((task, turn))
        task.add_done_callback(lambda done: self._landed(key, done))

    def _landed(self, key: K, task: asyncio.Task[None]) -> None:
        flights = self._flights.get(key, [])
        flights[:] = [flight for flight in flights if flight[0] is not task]
        self._start_next(key)

    async def _run_after(
        self, key: K, batch: list[tuple[T, asyncio.Future[R]]], turn: Turn, before: asyncio.Task[None] | None,
    ) -> None:
        self._count("batches")
        try:
            with taking(turn):
                collected = await self._collect(key, [item for item, _ in batch])
        finally:
            turn.hand_over()
        if before is not None:
            await asyncio.wait([before])  # its pushes and answers first; it never raises
        await deliver_all(collected.pushes)
        if collected.error is not None:
            self._answer(key, batch, None, collected.error)  # type: ignore[arg-type]
        else:
            self._answer(key, batch, collected.result, None)
