"""Fire-and-forget tasks, kept alive until they end, their failures logged.

The event loop keeps only weak references to its tasks (asyncio docs, `create_task`): a task
that nothing else references can be collected before it finishes. `spawn` holds each task in a
set until it is done, and logs an exception at once rather than leaving it to "Task exception
was never retrieved" whenever the task is collected."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger(__name__)

_running: set[asyncio.Task[Any]] = set()


def spawn(work: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(work, name=name)
    _running.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _running.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.error("background task %s failed", task.get_name(), exc_info=error)
