"""Appending to a conversation's commit log: seq, row, mailboxes, badges, pushes, in one
transaction. Messages and logged control events (membership, recall, edit) all come here."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from django.db import connection

from qim.actions.log_postgresql import Bumped, write_in_one_trip
from qim.actions.log_pushes import count_for_others, event_push, live_push
from qim.actions.log_rows import AllMembersBut, Appended, LogRow
from qim.actions.mailbox import EntrySpec, write_mailbox_entries
from qim.content_types import TypePolicy
from qim.models import Conversation, MembershipInterval, MessageMention, MessageRecord, User
from qim.notify import push_on_commit
from qim.queries.conversations import MemberSet, current_member_set, group_default_tier
from qim.queries.online import NOT_ASKED, OnlineDevices, wanted_members_params, wanted_members_sql


def lock_conversation(conversation_id: str) -> Conversation:
    """Take the conversation's row lock: the seq allocator (SQLite: the IMMEDIATE write lock)."""
    return Conversation.objects.select_for_update().get(pk=conversation_id)


def lock_with_members(
    conversation_id: str, *, senders: Collection[int] = (), mentioned: Collection[str] = (),
) -> tuple[Conversation, MemberSet]:
    """lock_conversation and current_member_set(partial=True): who, in which role and tier,
    of the members a SEND needs (all of them, unless the group's default tier is mention_only:
    then those who chose `full`, the `senders` and the `mentioned`); on PostgreSQL in one
    round trip, the lock in a CTE and the members joined to it (issue #22).

    The join reads the statement's snapshot, taken before a lock wait: a membership change
    that committed while this waited would be missed. Every change of members appends to the
    log under this lock (qim/actions/conversations.py), so the conversation's last_seq in
    that snapshot (`seen_seq`) differs from the locked row's then, and the members are read
    again after the lock. Role changes are logged too; a tier switch takes the lock without
    moving last_seq, and a SEND that raced it writes by the tier it read (unread is counted
    from the log, so nothing is lost either way). Raises Conversation.DoesNotExist."""
    if connection.vendor != "postgresql":
        conversation = lock_conversation(conversation_id)
        return conversation, current_member_set(conversation, partial=True, also_pks=senders, also_ids=mentioned)
    table = Conversation._meta.db_table
    fields = [field.attname for field in Conversation._meta.concrete_fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH c AS (SELECT * FROM {table} WHERE id = %s FOR UPDATE), w AS ({wanted_members_sql()}) "
            f"SELECT {', '.join(f'c.{name}' for name in fields)}, "
            f"(SELECT last_seq FROM {table} WHERE id = %s), m.pks, m.ids, m.roles, m.tiers FROM c "
            "LEFT JOIN LATERAL (SELECT array_agg(w.user_id) AS pks, array_agg(w.username) AS ids, "
            "array_agg(w.role) AS roles, array_agg(w.tier) AS tiers FROM w) m ON true",
            [conversation_id, *wanted_members_params(conversation_id, senders, mentioned), conversation_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Conversation.DoesNotExist(conversation_id)
    *values, seen_seq, pks, ids, roles, tiers = row
    conversation = Conversation.from_db(connection.alias, fields, values)
    if seen_seq != conversation.last_seq:
        return conversation, current_member_set(conversation, partial=True, also_pks=senders, also_ids=mentioned)
    partial = group_default_tier(conversation) == MembershipInterval.MENTION_ONLY
    return conversation, MemberSet.of(conversation, zip(pks or (), ids or (), roles or (), tiers or ()), partial=partial)


def append_to_log(
    conversation: Conversation,
    *,
    sender: User,
    sender_device_id: str,
    policy: TypePolicy,
    payload_json: str | None,
    recipients: dict[int, str],
    now_ms: int,
    kind: str = MessageRecord.MESSAGE,
    client_msg_id: str | None = None,
    target_conversation_seq: int | None = None,
    origin_device_id: str | None = None,
    defer_push: bool = False,
    online: OnlineDevices = NOT_ASKED,
    quiet: frozenset[int] = frozenset(),
    live: dict[int, str] | AllMembersBut | None = None,
    carried_mentions: tuple[str, bool] | None = None,
) -> Appended:
    """Write the next row of the log and diffuse it to `recipients` (user pk -> user id).

    Expects `conversation` locked by `lock_conversation` in the caller's transaction.
    Emits (after commit) one EVENT per recipient, grouped by node. Counted types also bump the
    badges of recipients other than the sender and queue a PushTask per offline device with
    push credentials. With `origin_device_id` the entries are never delivered to that device of
    the sender (protocol.md §5). With `defer_push` the caller sends `Appended.push`
    itself, later (recall and edit push once the target row is updated, design §2).
    `online` is who was connected before the lock was taken (qim.queries.online): a counted
    row's push goes to every device with credentials not in it.
    """
    row = LogRow(
        sender=sender, sender_device_id=sender_device_id, policy=policy, payload_json=payload_json,
        kind=kind, client_msg_id=client_msg_id, target_conversation_seq=target_conversation_seq,
        origin_device_id=origin_device_id, carried_mentions=carried_mentions,
    )
    [appended] = append_rows_to_log(
        conversation, [row], recipients=recipients, now_ms=now_ms, defer_push=defer_push, online=online,
        quiet=quiet, live=live,
    )
    return appended


def append_rows_to_log(
    conversation: Conversation,
    rows: Sequence[LogRow],
    *,
    recipients: dict[int, str],
    now_ms: int,
    defer_push: bool = False,
    online: OnlineDevices = NOT_ASKED,
    quiet: frozenset[int] = frozenset(),
    live: dict[int, str] | AllMembersBut | None = None,
) -> list[Appended]:
    """append_to_log for several rows at once, in order, all to the same recipients: the
    conversation row, each recipient's mailbox head and badge are written once for all of
    them (SEND batches, qim/actions/messages.py). Same lock, events and pushes per row.

    `quiet` are the recipients in the `mention_only` tier (design §4.3): their badge and
    offline pushes move only for rows that mention them. `live` are members who get no
    mailbox entry (mention_only, not mentioned): their online devices get each row as a live
    EVENT without mailbox_seq, encoded once."""
    records, update_fields = _next_records(conversation, rows, now_ms)
    increments = badge_increments(rows, recipients, quiet)
    bumped: Bumped | None = None
    if connection.vendor == "postgresql":  # every write below in one round trip
        seqs_per_row, bumped = write_in_one_trip(
            conversation, records, [_entry_spec(row, None) for row in rows], update_fields,
            recipients=recipients, increments=increments, now_ms=now_ms,
        )
    else:
        conversation.save(update_fields=update_fields)
        _insert_records(records)
        seqs_per_row = write_mailbox_entries(
            tenant_id=conversation.tenant_id, conversation_id=conversation.pk,
            specs=[_entry_spec(row, record.pk) for row, record in zip(rows, records)],
            recipients=recipients, now_ms=now_ms,
        )
    _insert_mentions(conversation, rows, records)
    pushed = count_for_others(conversation, rows, records, recipients, now_ms, online, increments, bumped, quiet)
    appended = []
    for row, record, seqs, tasks in zip(rows, records, seqs_per_row, pushed):
        exclude = (row.sender.username, row.origin_device_id) if row.origin_device_id else None
        push = event_push(conversation, record, row.entry_kind, recipients, seqs, exclude_device=exclude)
        live_only = live_push(conversation, record, row.entry_kind, live) if live else None
        if not defer_push:
            push_on_commit(push)
            if live_only is not None:
                push_on_commit(live_only)
        appended.append(Appended(record=record, mailbox_seqs=seqs, push_tasks=tasks, push=push, live_push=live_only))
    return appended


def badge_increments(
    rows: Sequence[LogRow], recipients: dict[int, str], quiet: frozenset[int] = frozenset()
) -> dict[int, int] | None:
    """Each recipient's badge grows by the counted rows others wrote, or for a `quiet`
    (mention_only) recipient by the rows of others that mention them; None when nothing moves."""
    counted = [row.sender.pk for row in rows if row.policy.counts_unread]
    if quiet and any(pk in quiet for pk in recipients):
        increments = {
            pk: sum(1 for row in rows if row.sender.pk != pk and (row.mentions(pk) if pk in quiet else row.policy.counts_unread))
            for pk in recipients
        }
        return increments if any(increments.values()) else None
    if not counted:
        return None
    # Every counted row, less those the recipient wrote: one pass over the members, not one
    # per member and row (a 1 000-member group, docs/performance.md,
    # "Batched, set-based SEND on PostgreSQL").
    own = {pk: counted.count(pk) for pk in set(counted)}
    return {pk: len(counted) - own.get(pk, 0) for pk in recipients}


def _entry_spec(row: LogRow, message_pk: int | None) -> EntrySpec:
    return EntrySpec(kind=row.entry_kind, message_id=message_pk, origin_device_id=row.origin_device_id,
                     origin_user_pk=row.sender.pk)


def _next_records(conversation: Conversation, rows: Sequence[LogRow], now_ms: int) -> tuple[list[MessageRecord], list[str]]:
    """The MessageRecords of `rows` at the next seqs (not saved yet), and the conversation's
    head moved past them in memory; answers them and the conversation fields to save."""
    first = conversation.last_seq + 1
    conversation.last_seq += len(rows)
    update_fields = ["last_seq", "counted_total"]
    own_totals = _sender_totals(conversation.pk, {row.sender.pk for row in rows})
    counted_totals, sender_totals = [], []
    for row in rows:
        counts = int(row.policy.counts_unread)
        conversation.counted_total += counts
        own_totals[row.sender.pk] += counts
        counted_totals.append(conversation.counted_total)
        sender_totals.append(own_totals[row.sender.pk])
    moved = [first + index for index, row in enumerate(rows) if row.moves_position]
    if moved:
        conversation.last_activity_seq, conversation.last_activity_ms = moved[-1], now_ms
        update_fields += ["last_activity_seq", "last_activity_ms"]
    records = [
        MessageRecord(
            tenant_id=conversation.tenant_id,
            conversation=conversation,
            conversation_seq=first + index,
            kind=row.kind,
            sender=row.sender,
            sender_device_id=row.sender_device_id,
            client_msg_id=row.client_msg_id,
            content_type=row.policy.content_type,
            payload=row.payload_json,
            sent_at_ms=now_ms,
            target_conversation_seq=row.target_conversation_seq,
            counts_unread=row.policy.counts_unread,
            affects_session_order=row.moves_position,
            timeline_visible=row.policy.timeline_visible,
            counted_total=counted_totals[index],
            sender_counted_total=sender_totals[index],
            reply_to_seq=row.reply_to_seq,
            **row.mention_columns(),
        )
        for index, row in enumerate(rows)
    ]
    return records, update_fields


def _sender_totals(conversation_id: str, sender_pks: set[int]) -> dict[int, int]:
    """Each sender's running count of counts_unread rows in the conversation so far: their
    newest row's (one seek of the sender_rows index each; the conversation is locked)."""
    totals = {}
    for pk in sorted(sender_pks):
        newest = (
            MessageRecord.objects.filter(conversation_id=conversation_id, sender_id=pk)
            .order_by("-conversation_seq").values_list("sender_counted_total", flat=True).first()
        )
        totals[pk] = newest or 0
    return totals


def _insert_mentions(conversation: Conversation, rows: Sequence[LogRow], records: Sequence[MessageRecord]) -> None:
    """The MessageMention rows mention_count counts (qim.queries.unread), for rows that name
    users; an @all names no one here (it is a flag on the row)."""
    mentions = [mention for row, record in zip(rows, records) for mention in MessageMention.rows_of(record, row.mentioned)]
    if mentions:
        MessageMention.objects.bulk_create(mentions)


def _insert_records(records: list[MessageRecord]) -> None:
    if len(records) == 1:
        records[0].save(force_insert=True)
    else:
        MessageRecord.objects.bulk_create(records)  # both backends return the new pks
