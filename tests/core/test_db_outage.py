"""Which database errors are an outage (answered `unavailable`, logged as one WARNING line) and
which stay bugs (ERROR with traceback): real psycopg errors, wrapped as Django wraps them."""

from __future__ import annotations

import logging
import sys

import psycopg
import pytest
from django.db import utils as db_utils

from qim.infra.db_outage import DatabaseUnavailableFilter, is_database_unavailable
from qim.gateway.errors import unavailable_or_internal
from tests.harness.services import free_port


def wrapped(cause: BaseException, django_class: type[Exception] = db_utils.OperationalError) -> Exception:
    """`cause` as Django's DatabaseErrorWrapper raises it: the Django class, caused by psycopg's."""
    try:
        raise django_class(str(cause)) from cause
    except django_class as error:
        return error


def refused_connection() -> psycopg.OperationalError:
    """What psycopg raises when nothing listens where the database should be."""
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(f"host=127.0.0.1 port={free_port()} dbname=qim user=qim connect_timeout=5")
    return caught.value


def test_a_refused_connection_is_an_outage() -> None:
    assert is_database_unavailable(wrapped(refused_connection()))


def test_an_error_raised_while_handling_an_outage_is_one_too() -> None:
    try:
        try:
            raise wrapped(refused_connection())
        except db_utils.OperationalError as outage:
            raise RuntimeError("the handler gave up") from outage
    except RuntimeError as error:
        assert is_database_unavailable(error)


def test_an_administrator_shutdown_and_a_closed_connection_are_outages() -> None:
    assert is_database_unavailable(wrapped(psycopg.errors.AdminShutdown("terminating connection")))
    assert is_database_unavailable(wrapped(psycopg.InterfaceError("connection already closed"), db_utils.InterfaceError))


def test_query_errors_and_sqlite_locks_are_not_outages() -> None:
    assert not is_database_unavailable(wrapped(psycopg.errors.SerializationFailure("could not serialize")))
    assert not is_database_unavailable(db_utils.OperationalError("database is locked"))  # SQLite: no psycopg cause
    assert not is_database_unavailable(ValueError("a bug"))
    assert not is_database_unavailable(None)


def test_frames_get_unavailable_with_a_retry_hint_and_bugs_stay_internal() -> None:
    frame = unavailable_or_internal(wrapped(refused_connection()), "r1")
    assert (frame["code"], frame["req_id"], frame["retry_after_ms"]) == ("unavailable", "r1", 1000)
    assert unavailable_or_internal(KeyError("x"), "r2")["code"] == "internal"


def record_of(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except type(error):
        exc_info = sys.exc_info()
    return logging.LogRecord("qim.gateway.consumer", logging.ERROR, __file__, 1, "handler for %s failed", ("SEND",), exc_info)


def test_the_log_filter_makes_an_outage_one_warning_line_and_leaves_bugs_alone() -> None:
    outage = record_of(wrapped(refused_connection()))
    assert DatabaseUnavailableFilter().filter(outage)
    assert (outage.levelname, outage.exc_info) == ("WARNING", None)
    assert outage.getMessage().startswith("handler for SEND failed: database unavailable (connection failed")
    bug = record_of(KeyError("x"))
    assert DatabaseUnavailableFilter().filter(bug)
    assert bug.levelname == "ERROR" and bug.exc_info is not None
