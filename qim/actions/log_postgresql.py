"""A log append's writes on PostgreSQL in one round trip (issue #22): the conversation's head,
the log rows, every recipient's mailbox rows and head, and the badges with the push-capable
devices of the bumped users, sent as one multi-statement query (qim.db_statements).

They were four round trips, each waiting for the one before: the mailbox statement needed the
log rows' ids from the INSERT's answer. It now reads them itself, by the seqs this append
allocated (unique per conversation, and the rows are the transaction's own, inserted by the
statement just before). PostgreSQL still runs the statements one after the other, in the
order they always ran: the heads' upsert takes its row locks in ascending user order and
completes before the badges' upsert takes theirs in the same order, so two appends to groups
with common members cannot deadlock, as before. An error in any statement (a client_msg_id
that raced a retry on another node: IntegrityError) aborts the whole transaction, which the
caller rolls back as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models.sql import InsertQuery

from qim.actions.mailbox import EntrySpec, badge_statements, entries_statement, id_chunks, read_badge_rows
from qim.db_statements import Statement, run_together
from qim.models import Conversation, MessageRecord

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
    statements answered (None without increments)."""
    seqs = [record.conversation_seq for record in records]
    statements = [_conversation_update(conversation, update_fields), _insert_records(records)]
    recipient_chunks = list(id_chunks(sorted(set(recipients))))
    statements += [
        entries_statement(conversation.tenant_id, conversation.pk, specs, chunk, now_ms, message_seqs=seqs)
        for chunk in recipient_chunks
    ]
    badges = badge_statements(increments, now_ms) if increments is not None else []
    _, inserted, *results = run_together(statements + badges)
    for record, (pk,) in zip(records, inserted, strict=True):
        record.pk = pk
        record._state.adding, record._state.db = False, connection.alias
    per_spec: list[dict[int, int]] = [{} for _ in specs]
    for user_pk, head in (row for rows in results[: len(recipient_chunks)] for row in rows):
        first = head - len(specs) + 1
        for index, seqs_of_spec in enumerate(per_spec):
            seqs_of_spec[user_pk] = first + index
    if increments is None:
        return per_spec, None
    bumped: Bumped = ({}, [])
    for rows in results[len(recipient_chunks):]:
        read_badge_rows(rows, *bumped)
    return per_spec, bumped


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
