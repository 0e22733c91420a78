"""Group commit: work that would queue on one database lock is gathered and written together."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from qim.gateway.db import in_db_thread
from qim.errors import Refused
from qim.infra.log_context import unbound

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


class KeyedBatcher(Generic[K, T, R]):
    """Per process, on the event loop: at most one batch per key runs at a time; items
    submitted for a key while its batch runs wait, and go together, in arrival order, in the
    next one (at most `max_items`).

    `apply(key, items)` runs in a DB thread (one transaction, usually under the key's row
    lock) and answers one result or Refused per item. An uncontended item runs at once,
    alone, so batching adds no latency; under contention a batch pays the lock, the commit
    and the per-recipient rows once for all its items (docs/performance.md,
    "Batched, set-based SEND on PostgreSQL"). An exception raised by `apply` goes to every item
    of its batch. `after_batch(key, results)` runs on the loop once the batch is answered (its
    push, say). The node counters `<name>_requests` and `<name>_batches` count what came in and
    how many transactions it took.
    """

    def __init__(
        self,
        name: str,
        apply: Callable[[K, list[T]], Sequence[R | Refused]],
        *,
        max_items: int = 64,
        after_batch: Callable[[K, Sequence[R | Refused]], None] | None = None,
        on_loop: bool = False,
    ) -> None:
        self.name = name
        # on_loop: `apply` is a coroutine function awaited on the loop (a node call, say)
        # rather than database work run in a DB thread.
        self._apply = apply if on_loop else in_db_thread(apply)
        self.max_items = max_items
        self.after_batch = after_batch
        self._waiting: dict[K, list[tuple[T, asyncio.Future[R]]]] = {}
        self._drains: dict[K, asyncio.Task[None]] = {}
        # The node's counter names, made once: counting was 2 us a submit (an import, the node
        # lookup, two f-strings; docs/performance.md,
        # "Lean handshake, upgrade, frame and per-socket paths").
        self._requests_counter, self._batches_counter = f"{name}_requests", f"{name}_batches"

    async def submit(self, key: K, item: T) -> R:
        """This item's own result; raises its own Refused."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((item, future))
        _node_counters()[self._requests_counter] += 1
        if key not in self._drains:
            with unbound():  # the batch serves every submitter: its lines name none of them
                self._drains[key] = asyncio.create_task(self._drain(key))
        return await future

    async def _drain(self, key: K) -> None:
        try:
            while waiting := self._waiting.pop(key, None):
                if len(waiting) > self.max_items:
                    waiting, self._waiting[key] = waiting[: self.max_items], waiting[self.max_items :]
                await self._run(key, waiting)
        finally:
            del self._drains[key]

    async def _run(self, key: K, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        _node_counters()[self._batches_counter] += 1
        try:
            results = await self._apply(key, [item for item, _ in batch])
        except Exception as error:  # each item answers as it would have alone
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # its connection went away; what it asked for stays written
                continue
            if isinstance(result, Refused):
                future.set_exception(result)
            else:
                future.set_result(result)
        if self.after_batch is not None:
            self.after_batch(key, results)



def _node_counters() -> Counter[str]:
    """This process's node's counters (qim/node/connection_node.py imports batchers: imported on first use)."""
    global _get_node
    if _get_node is None:
        from qim.node.connection_node import get_node

        _get_node = get_node
    return _get_node().counters


_get_node: Callable[[], Any] | None = None
