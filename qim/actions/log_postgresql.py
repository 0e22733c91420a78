"""A log append's writes on PostgreSQL in one round trip (issue #22): the conversation's head,
the log rows, every recipient's mailbox rows and head, and the badges with the push-capable
devices of the bumped users, sent as one multi-statement query (qim.infra.db_statements).

They were four round trips, each waiting for the one before: the mailbox statement needed the
log rows' ids from the INSERT's answer. It now reads them itself, by the seqs this append
allocated (unique per conversation, and the rows are the transaction's own, inserted by the
statement just before). PostgreSQL runs the statements one after the other: every head row
lock is taken, in ascending user order, before any badge row lock, also in ascending user
order, so two appends to groups with common members cannot deadlock. An error in any
statement (a client_msg_id that raced a retry on another node: IntegrityError) aborts the
whole transaction, which the caller rolls back as before.

Heads and badges are plain UPDATEs of the rows that exist (a member's rows exist after their
first message), under FORCE_INDEX_SCANS so they lock in user order (the push-capable devices
are read after, with the planner's settings back): an upsert locks each row
before it updates it, a WAL record and a buffer visit more per member and table, about a
millisecond of a 1 000-member batch (docs/performance.md,
"Batched, set-based SEND on PostgreSQL"). When a row is missing (a member's first message, or a
row another transaction is still inserting, which an UPDATE does not see), the try is rolled
back to the savepoint taken after the log rows, which also releases its row locks, and the
heads and badges are written by the ordered upserts, as always before: a second round trip, and
no transaction ever waits on a row while holding a row it took out of order.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models.sql import InsertQuery

from qim.actions.mailbox import (
    EntrySpec,
    badge_statements,
    badge_update_statements,
    bumped_users,
    entries_statement,
    id_chunks,
    pushable_badges_statements,
    read_badge_rows,
)
from qim.infra.db_statements import Statement, run_together
from qim.models import Conversation, MessageRecord

# The heads' and badges' UPDATEs must lock their rows in ascending user order, which only the
# primary key's index scan does (a seq or bitmap scan goes in heap order); these settings leave
# the planner no other scan for them. SET LOCAL lasts until the transaction ends, RESET puts
# the session's value back for the statements after them (QIM sets neither elsewhere).
FORCE_INDEX_SCANS: list[Statement] = [("SET LOCAL enable_seqscan = off", []), ("SET LOCAL enable_bitmapscan = off", [])]
UNFORCE_INDEX_SCANS: list[Statement] = [("RESET enable_seqscan", []), ("RESET enable_bitmapscan", [])]
_SAVEPOINT = "qim_mailbox_rows"

# (final badges: user pk -> badge, of the users with a push-capable device; those devices:
# (device pk, user pk, device_id))
Bumped = tuple[dict[int, int], list[tuple[int, int, str]]]


def write_in_one_trip(
    conversation: Conversation,
    records: Sequence[MessageRecord],
    specs: Sequence[EntrySpec],
    update_fields: Sequence[str],
    *,
    recipients: dict[int, str],
    increments: dict[int, int] | None,
    now_ms: int,
) -> tuple[list[dict[int, int]], Bumped | None]:
    """Save `conversation`'s `update_fields` and insert `records` (their pks are set), put
    each spec (one per record, message_id unset) in every recipient's mailbox and bump the
    badges by `increments`; answers, per spec, user pk -> its mailbox_seq, and what the badge
    statements answered (None without increments).

    One round trip when every recipient's head and badge rows exist (a member's after their
    first message), two when some do not (module doc)."""
    seqs = [record.conversation_seq for record in records]
    chunks = list(id_chunks(sorted(set(recipients))))

    def entries(existing_only: bool) -> list[Statement]:
        return [
            entries_statement(conversation.tenant_id, conversation.pk, specs, chunk, now_ms, message_seqs=seqs,
                              existing_only=existing_only)
            for chunk in chunks
        ]

    # The bumped users, in lock order, chunked once for the UPDATEs and the devices' read.
    bumped_chunks = list(id_chunks(bumped_users(increments))) if increments is not None else []
    updates = badge_update_statements(increments, bumped_chunks, now_ms) if increments is not None else []
    pushable = pushable_badges_statements(bumped_chunks)
    _, inserted, *results = run_together([
        _conversation_update(conversation, update_fields), _insert_records(records), (f"SAVEPOINT {_SAVEPOINT}", []),
        *FORCE_INDEX_SCANS, *entries(existing_only=True), *updates, *UNFORCE_INDEX_SCANS, *pushable,
    ])
    for record, (pk,) in zip(records, inserted, strict=True):
        record.pk = pk
        record._state.adding, record._state.db = False, connection.alias
    results = results[1 + len(FORCE_INDEX_SCANS):]
    heads, counts = results[: len(chunks)], results[len(chunks): len(chunks) + len(updates)]
    bumped: Bumped = ({}, [])
    for rows in results[len(results) - len(pushable):]:
        for user_pk, badge, device_pk, device_id in rows:
            bumped[0][user_pk] = badge
            bumped[1].append((device_pk, user_pk, device_id))
    if sum(map(len, heads)) < len(set(recipients)) or sum(rows[0][0] for rows in counts) < sum(map(len, bumped_chunks)):
        # Some rows do not exist yet: undo this try (its row locks go with it) and upsert.
        upserts = badge_statements(increments, now_ms) if increments is not None else []
        _, *results = run_together([(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}", []), *entries(existing_only=False), *upserts])
        heads, bumped = results[: len(chunks)], ({}, [])
        for rows in results[len(chunks):]:
            read_badge_rows(rows, *bumped)
    per_spec: list[dict[int, int]] = [{} for _ in specs]
    for user_pk, head in (row for rows in heads for row in rows):
        first = head - len(specs) + 1
        for index, seqs_of_spec in enumerate(per_spec):
            seqs_of_spec[user_pk] = first + index
    return per_spec, (bumped if increments is not None else None)


def _conversation_update(conversation: Conversation, update_fields: Sequence[str]) -> Statement:
    """The UPDATE that conversation.save(update_fields=...) would send (no signal listens)."""
    meta = Conversation._meta
    sets = ", ".join(f"{meta.get_field(name).column} = %s" for name in update_fields)
    values = [getattr(conversation, name) for name in update_fields]
    return f"UPDATE {meta.db_table} SET {sets} WHERE {meta.pk.column} = %s", [*values, conversation.pk]


def _insert_records(records: Sequence[MessageRecord]) -> Statement:
    """The INSERT ... RETURNING id that bulk_create would send for `records` (Django's own
    compiler, so every field is prepared as the ORM does it)."""
    meta = MessageRecord._meta
    query = InsertQuery(MessageRecord)
    query.insert_values([field for field in meta.concrete_fields if field is not meta.pk], records)
    compiler = query.get_compiler(connection=connection)
    compiler.returning_fields = [meta.pk]
    [(sql, params)] = compiler.as_sql()
    return sql, list(params)
