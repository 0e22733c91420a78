"""The input queue daphne gives each application instance, without asyncio.Queue's weight:
asyncio.Queue allocates three deques and an Event (four 760-byte deque blocks, about 3 KiB)
for every socket, idle or not (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths")."""

from __future__ import annotations

import asyncio
from typing import Any


class LeanQueue:
    """Unbounded, first in first out; what daphne uses of asyncio.Queue: `put_nowait` (the
    protocol's side) and `get` (the application's `receive`). Items and waiting getters sit
    in lists made when needed and dropped once empty: a socket's queue is nearly always empty,
    and two empty lists per socket were two more objects for the collector to walk in every
    pass (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths")."""

    __slots__ = ("_items", "_getters")

    def __init__(self) -> None:
        self._items: list[Any] | None = None
        self._getters: list[asyncio.Future[Any]] | None = None

    def qsize(self) -> int:
        return len(self._items) if self._items else 0

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: Any) -> None:
        getters = self._getters
        while getters:
            waiter = getters.pop(0)
            if not getters:
                self._getters = None
            if not waiter.done():
                waiter.set_result(item)
                return
        if self._items is None:
            self._items = []
        self._items.append(item)

    async def get(self) -> Any:
        items = self._items
        if items:
            item = items.pop(0)
            if not items:
                self._items = None
            return item
        waiter = asyncio.get_running_loop().create_future()
        if self._getters is None:
            self._getters = []
        self._getters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            self._give_back(waiter)
            raise

    def _give_back(self, waiter: asyncio.Future[Any]) -> None:
        """A cancelled get: an item already handed to it goes back to the front."""
        if waiter.done() and not waiter.cancelled():
            if self._items is None:
                self._items = []
            self._items.insert(0, waiter.result())
        elif self._getters and waiter in self._getters:
            self._getters.remove(waiter)
            if not self._getters:
                self._getters = None
