"""Making a batch happen for sure in tests of qim/gateway/batching.py: hold the lock a batch's
transaction takes first, and wait until the node has received every item (its counters)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.harness.personas import TenantHandle
from tests.harness.qim_process import QimDatabase, QimNode


def counter(node: QimNode, tenant: TenantHandle, name: str) -> int:
    return node.stats(tenant.admin_token)["counters"].get(name, 0)


async def until_counted(node: QimNode, tenant: TenantHandle, name: str, expected: int) -> None:
    """Until the node's counter `name` reaches `expected` (polled; fails after 20 s)."""
    deadline = time.monotonic() + 20
    while (seen := await asyncio.to_thread(counter, node, tenant, name)) < expected:
        assert time.monotonic() < deadline, f"{name}: the node counted {seen} of {expected}"
        await asyncio.sleep(0.05)


@contextmanager
def lock_held(db: QimDatabase, pg_lock_sql: str, params: tuple) -> Iterator[None]:
    """SQLite's write lock (BEGIN IMMEDIATE), or on PostgreSQL the one row `pg_lock_sql`
    (a SELECT ... FOR UPDATE) locks, until the block ends."""
    if db.pg is None:
        conn = sqlite3.connect(db.url.removeprefix("sqlite:///"), isolation_level=None, timeout=30)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(db.pg.url(db.dbname or "postgres")) as conn:
        locked = conn.execute(pg_lock_sql, params).fetchall()
        assert len(locked) == 1, f"{len(locked)} rows to lock, not one: {pg_lock_sql}"
        try:
            yield
        finally:
            conn.rollback()
