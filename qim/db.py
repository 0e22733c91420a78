"""Running ORM work from async code: always in an executor thread, never on the event loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from channels.db import database_sync_to_async

P = ParamSpec("P")
R = TypeVar("R")


def in_db_thread(fn: Callable[P, R]) -> Callable[P, "R"]:
    """Wrap a sync function so awaiting it runs it in a worker thread.

    Not thread-sensitive: frame handlers of different connections run in parallel, each thread
    keeping its own persistent database connection (CONN_MAX_AGE=None). Transactions open and
    close inside the wrapped function, never across an await.
    """
    return database_sync_to_async(fn, thread_sensitive=False)
