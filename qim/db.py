"""Running ORM work from async code: always in an executor thread, never on the event loop."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from channels.db import database_sync_to_async

from qim.metrics.instruments import timed_db
from qim.notify import collecting_pushes, deliver_all

P = ParamSpec("P")
R = TypeVar("R")


def in_db_thread(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Wrap a sync function so awaiting it runs it in a worker thread.

    Not thread-sensitive: frame handlers of different connections run in parallel, each thread
    keeping its own persistent database connection (CONN_MAX_AGE=None). Transactions open and
    close inside the wrapped function, never across an await. The pushes its commits make are
    written by the event loop once it returns, before its result: one thread hop per call,
    where a push sent from the thread would wait for the loop and hold the thread meanwhile
    (a busy loop, a room flush say, then delays every step of the call).
    """
    run = database_sync_to_async(collecting_pushes(timed_db(fn)), thread_sensitive=False)

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        collected = await run(*args, **kwargs)
        await deliver_all(collected.pushes)
        return collected.unwrap()

    return call
