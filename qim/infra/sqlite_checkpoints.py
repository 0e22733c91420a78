"""SQLite's WAL checkpoints moved off the commits of a server process (the embedded default).

By default the connection whose commit takes the WAL past 1 000 pages copies the WAL into
the database file, fsync included, inside that commit: about one DM SEND in a hundred paid
4-6 ms more for it, which is the p99 of a DM (docs/performance.md,
"SQLite checkpoints off the commit path"). A server process instead turns automatic checkpoints
off on its own connections and runs a PASSIVE checkpoint from a thread of its own every
QIM_SQLITE_CHECKPOINT_INTERVAL_S: it copies what no reader still needs and waits for no lock,
so commits and reads go on meanwhile.

Nothing committed depends on the checkpointer: a commit is in the WAL either way, a server
that dies leaves a WAL that the next connection to open the file replays, and other
processes (management commands, the push worker) keep SQLite's automatic checkpoints.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from django.db import connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)


def take_over(database: dict, interval_s: float) -> threading.Thread | None:
    """In this process, checkpoint `database` (a Django DATABASES entry) from a thread every
    `interval_s` instead of inside commits. Answers the thread; None (nothing changed) when
    the database is not an SQLite file or `interval_s` is 0."""
    if database["ENGINE"] != "django.db.backends.sqlite3" or database["NAME"] in ("", ":memory:") or interval_s <= 0:
        return None
    connection_created.connect(_no_automatic_checkpoints, dispatch_uid="qim-sqlite-checkpoints")
    for opened in connections.all(initialized_only=True):  # any opened before (this thread's)
        _no_automatic_checkpoints(None, opened)
    thread = threading.Thread(
        target=_checkpoint_forever, args=(str(database["NAME"]), interval_s), name="qim-sqlite-checkpoints", daemon=True
    )
    thread.start()
    return thread


def _no_automatic_checkpoints(sender, connection, **kwargs) -> None:  # type: ignore[no-untyped-def]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_autocheckpoint=0")


def _checkpoint_forever(path: str, interval_s: float) -> None:
    connection = sqlite3.connect(path, timeout=30)  # this thread's own, used by it alone
    while True:
        time.sleep(interval_s)
        try:
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:  # the next round tries again; meanwhile the WAL only grows
            logger.exception("SQLite WAL checkpoint failed")
