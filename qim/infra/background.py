"""Fire-and-forget tasks, kept alive until they end, their failures logged.

The event loop keeps only weak references to its tasks (asyncio docs, `create_task`): a task
that nothing else references can be collected before it finishes. `spawn` holds each task in a
set until it is done, and logs an exception at once rather than leaving it to "Task exception
was never retrieved" whenever the task is collected."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

logger = logging.getLogger(__name__)

_running: set[asyncio.Task[Any]] = set()


def spawn(work: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(work, name=name)
    _running.add(task)
    task.add_done_callback(_finished)
    return task


async def every(
    period_s: float | Callable[[], float], step: Callable[[], Awaitable[Any]], *, log: logging.Logger, failed: str
) -> None:
    """Run `step` after each period, forever (a node's sweeps and re-reports): a failing step
    is logged as `failed` on `log`, with its traceback, and the next period tries again.
    A callable period is read before each wait, so a setting changed meanwhile applies."""
    while True:
        await asyncio.sleep(period_s() if callable(period_s) else period_s)
        try:
            await step()
        except Exception:
            log.exception(failed)


def _finished(task: asyncio.Task[Any]) -> None:
    _running.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.error("background task %s failed", task.get_name(), exc_info=error)
