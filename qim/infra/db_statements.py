"""Several SQL statements in one round trip to PostgreSQL (issue #22).

A SEND batch's statements that do not need each other's answers in Python (the log rows, the
mailbox rows, the badges; the idempotency read and the online read) used to be one round trip
each: on a loaded machine every round trip is a wake-up of PostgreSQL and of a node thread,
which cost more than the statements' own work (docs/performance.md,
"Batched, set-based SEND on PostgreSQL"). Django's psycopg 3 cursor binds parameters on the
client and sends a query by the simple query protocol, which takes several statements separated
by `;` in one message; PostgreSQL runs them in order, and psycopg keeps one result per
statement (`nextset`). Inside a transaction an error in any of them aborts the transaction as
it would have one at a time; outside one they run as one implicit transaction (only reads are
sent that way here).

Other databases, and a connection set to bind on the server (`server_side_binding`, which
uses the extended protocol: one statement per message), run the statements one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

Statement = tuple[str, Sequence[Any]]


def run_together(statements: Sequence[Statement]) -> list[list[tuple]]:
    """Run `statements` in order; answers each one's rows ([] for one without rows).
    Their SQL must not contain `;` (a literal `%` is written `%%`, as for any Django cursor)."""
    with connection.cursor() as cursor:
        if len(statements) > 1 and _client_binding(cursor):
            cursor.execute("; ".join(sql for sql, _ in statements), [p for _, params in statements for p in params])
            results = []
            for index in range(len(statements)):
                if index:
                    cursor.nextset()
                results.append(cursor.fetchall() if cursor.description else [])
            return results
        results = []
        for sql, params in statements:
            cursor.execute(sql, params)
            results.append(cursor.fetchall() if cursor.description else [])
        return results


def _client_binding(cursor: Any) -> bool:
    if connection.vendor != "postgresql":
        return False
    import psycopg  # only with the PostgreSQL backend, which requires it

    return isinstance(cursor.cursor, psycopg.ClientCursor)
