"""Running ORM work from async code: always in an executor thread, never on the event loop."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from qim.infra.instruments import timed_db
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
    run = database_sync_to_async(collecting_pushes(timed_db(checked_when_idle(fn))), thread_sensitive=False)

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        collected = await run(*args, **kwargs)
        await deliver_all(collected.pushes)
        return collected.unwrap()

    return call


def checked_when_idle(fn: Callable[P, R]) -> Callable[P, R]:
    """Django runs its health check (`SELECT 1`, CONN_HEALTH_CHECKS) on the first query after
    each close_old_connections, which channels calls around every DB-thread call: one round
    trip more per frame. Skip it when this thread's connection finished a call less than
    QIM_DB_HEALTH_CHECK_IDLE_S ago with no error outstanding (an error makes Django check the
    connection at the end of the call that met it and close it if broken); a connection that
    sat idle longer is checked as before."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        conn = connections[DEFAULT_DB_ALIAS]
        used_at = getattr(conn, "qim_used_at", None)
        if (
            conn.connection is not None and used_at is not None and not conn.errors_occurred
            and time.monotonic() - used_at < settings.QIM_DB_HEALTH_CHECK_IDLE_S
        ):
            conn.health_check_done = True
        try:
            return fn(*args, **kwargs)
        finally:
            conn.qim_used_at = time.monotonic()

    return run
