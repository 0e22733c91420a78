"""daphne's per-socket input queue (qim/server/lean_queue.py): first in first out, a waiting
get takes the next put, a cancelled get loses nothing, and an empty queue keeps no list (a
socket's queue is nearly always empty: two lists per idle socket were collector work)."""

from __future__ import annotations

import asyncio

import pytest

from qim.server.lean_queue import LeanQueue


def holds_nothing(queue: LeanQueue) -> bool:
    return queue._items is None and queue._getters is None and queue.empty() and queue.qsize() == 0


async def test_items_come_out_in_order_and_leave_no_list() -> None:
    queue = LeanQueue()
    for item in ("auth", "sync", "join"):
        queue.put_nowait(item)
    assert queue.qsize() == 3
    assert [await queue.get() for _ in range(3)] == ["auth", "sync", "join"]
    assert holds_nothing(queue)


async def test_a_waiting_get_takes_the_next_put() -> None:
    queue = LeanQueue()
    waiting = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert queue._getters is not None and len(queue._getters) == 1
    queue.put_nowait("auth")
    assert await asyncio.wait_for(waiting, 1) == "auth"
    assert holds_nothing(queue)
    queue.put_nowait("sync")
    assert await queue.get() == "sync"
    assert holds_nothing(queue)


async def test_a_cancelled_get_loses_nothing() -> None:
    queue = LeanQueue()
    cancelled = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert holds_nothing(queue)
    # Handed an item and cancelled before it ran: the item goes back to the front.
    handed = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    queue.put_nowait("first")
    queue.put_nowait("second")
    handed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert [await queue.get(), await queue.get()] == ["first", "second"]
    assert holds_nothing(queue)
