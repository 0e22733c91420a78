"""Telling a database that is away (stopped, restarting, unreachable) from a bug.

While PostgreSQL is down every ORM call fails with an OperationalError. That is an operating
condition, not a server fault: frames and REST calls answer `unavailable` (retry later; a SEND
retried with its client_msg_id is written at most once) and the log says so in one WARNING
line, where a bug keeps its ERROR and traceback. Django reconnects by itself afterwards
(CONN_HEALTH_CHECKS, and a connection with errors is closed after each call)."""

from __future__ import annotations

import logging

from django.db import utils as db_utils

# SQLSTATE classes of a connection that is gone or refused: 08 connection exception;
# 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now (starting, stopping).
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03")
# A hint to clients: PostgreSQL restarts take seconds.
RETRY_AFTER_MS = 1000
MESSAGE = "the database is unavailable; retry later (a SEND with the same client_msg_id)"


def is_database_unavailable(error: BaseException | None) -> bool:
    """True for an error (or one it was raised from) meaning the database cannot be reached."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, db_utils.InterfaceError):
            return True
        if isinstance(error, db_utils.OperationalError) and _connection_lost(error.__cause__):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def _connection_lost(cause: BaseException | None) -> bool:
    """psycopg's own error: no SQLSTATE (refused, reset, closed) or one of a lost connection."""
    if cause is None or type(cause).__module__.split(".")[0] != "psycopg":
        return False  # SQLite's "database is locked" and the like are not outages
    state = getattr(cause, "sqlstate", None)
    return state is None or state.startswith(_UNAVAILABLE_STATES)


class DatabaseUnavailableFilter(logging.Filter):
    """Logs an error caused by an unreachable database as one WARNING line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if is_database_unavailable(error):
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            record.msg, record.args = f"{record.getMessage()}: database unavailable ({first_line})", ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True
