"""Appending to a conversation's commit log: seq, row, mailboxes, badges, pushes, in one
transaction. Messages and logged control events (membership, recall, edit) all come here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection

from qim.actions.mailbox import (
    EntrySpec,
    bump_badges_finding_devices,
    enqueue_offline_pushes,
    event_push_parts,
    write_mailbox_entries,
)
from qim.actions.log_postgresql import Bumped, write_in_one_trip
from qim.content_types import OWN_SEQ, TypePolicy
from qim.models import Conversation, MembershipInterval, MessageRecord, PushTask, User, UserMailboxEntry
from qim.notify import UserPush, push_on_commit
from qim.queries.conversations import current_members
from qim.queries.online import NOT_ASKED, OnlineDevices
from qim.render import mailbox_event, message_object


def lock_conversation(conversation_id: str) -> Conversation:
    """Take the conversation's row lock: the seq allocator (SQLite: the IMMEDIATE write lock)."""
    return Conversation.objects.select_for_update().get(pk=conversation_id)


def lock_with_members(conversation_id: str) -> tuple[Conversation, dict[int, str]]:
    """lock_conversation and current_members (user pk -> user id); on PostgreSQL in one round
    trip, the lock in a CTE and the members joined to it (issue #22).

    The join reads the statement's snapshot, taken before a lock wait: a membership change
    that committed while this waited would be missed. Every change of members appends to the
    log under this lock (qim/actions/conversations.py), so the conversation's last_seq in
    that snapshot (`seen_seq`) differs from the locked row's then, and the members are read
    again after the lock. Raises Conversation.DoesNotExist."""
    if connection.vendor != "postgresql":
        conversation = lock_conversation(conversation_id)
        return conversation, current_members(conversation.pk)
    table = Conversation._meta.db_table
    fields = [field.attname for field in Conversation._meta.concrete_fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH c AS (SELECT * FROM {table} WHERE id = %s FOR UPDATE) "
            f"SELECT {', '.join(f'c.{name}' for name in fields)}, "
            f"(SELECT last_seq FROM {table} WHERE id = %s), m.pks, m.ids FROM c "
            "LEFT JOIN LATERAL (SELECT array_agg(i.user_id) AS pks, array_agg(u.username) AS ids "
            f"FROM {MembershipInterval._meta.db_table} i JOIN {User._meta.db_table} u ON u.id = i.user_id "
            "WHERE i.conversation_id = c.id AND i.left_at IS NULL) m ON true",
            [conversation_id, conversation_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Conversation.DoesNotExist(conversation_id)
    *values, seen_seq, pks, ids = row
    conversation = Conversation.from_db(connection.alias, fields, values)
    if seen_seq != conversation.last_seq:
        return conversation, current_members(conversation.pk)
    return conversation, dict(zip(pks or (), ids or ()))


@dataclass(frozen=True)
class Appended:
    record: MessageRecord
    mailbox_seqs: dict[int, int]
    push_tasks: int
    # The EVENT push of this row; already queued on commit unless `defer_push`.
    push: UserPush | None = None


@dataclass(frozen=True)
class LogRow:
    """One row to append: its writer, its type and its payload."""

    sender: User
    sender_device_id: str
    policy: TypePolicy
    payload_json: str | None
    kind: str = MessageRecord.MESSAGE
    client_msg_id: str | None = None
    target_conversation_seq: int | None = None
    origin_device_id: str | None = None

    @property
    def moves_position(self) -> bool:
        # anchor_target rows never move the latest position (design §2: two recalls in a
        # row), whatever their type says; the row records the effective flag.
        return self.policy.affects_session_order and self.policy.anchor_mode == OWN_SEQ

    @property
    def entry_kind(self) -> str:
        return UserMailboxEntry.MESSAGE if self.kind == MessageRecord.MESSAGE else UserMailboxEntry.CONTROL


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
        origin_device_id=origin_device_id,
    )
    [appended] = append_rows_to_log(
        conversation, [row], recipients=recipients, now_ms=now_ms, defer_push=defer_push, online=online,
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
) -> list[Appended]:
    """append_to_log for several rows at once, in order, all to the same recipients: the
    conversation row, each recipient's mailbox head and badge are written once for all of
    them (SEND batches, qim/actions/messages.py). Same lock, events and pushes per row."""
    records, update_fields = _next_records(conversation, rows, now_ms)
    increments = badge_increments(rows, recipients)
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
    pushed = _count_for_others(conversation, rows, records, recipients, now_ms, online, increments, bumped)
    appended = []
    for row, record, seqs, tasks in zip(rows, records, seqs_per_row, pushed):
        exclude = (row.sender.username, row.origin_device_id) if row.origin_device_id else None
        push = event_push(conversation, record, row.entry_kind, recipients, seqs, exclude_device=exclude)
        if not defer_push:
            push_on_commit(push)
        appended.append(Appended(record=record, mailbox_seqs=seqs, push_tasks=tasks, push=push))
    return appended


def badge_increments(rows: Sequence[LogRow], recipients: dict[int, str]) -> dict[int, int] | None:
    """Each recipient's badge grows by the counted rows others wrote; None when no row counts."""
    counted = [row.sender.pk for row in rows if row.policy.counts_unread]
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
    update_fields = ["last_seq"]
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
        )
        for index, row in enumerate(rows)
    ]
    return records, update_fields


def _insert_records(records: list[MessageRecord]) -> None:
    if len(records) == 1:
        records[0].save(force_insert=True)
    else:
        MessageRecord.objects.bulk_create(records)  # both backends return the new pks


def _count_for_others(
    conversation: Conversation,
    rows: Sequence[LogRow],
    records: Sequence[MessageRecord],
    recipients: dict[int, str],
    now_ms: int,
    online_by_id: OnlineDevices,
    increments: dict[int, int] | None,
    bumped: Bumped | None,
) -> list[int]:
    """Badges and offline pushes of the counted rows: each recipient's badge grows by
    `increments` (already, when `bumped` holds what that answered); answers the PushTasks
    queued per row. Asks no one who is online: the row lock is held (`online_by_id` was
    asked before it, qim.queries.online)."""
    if increments is None:
        return [0] * len(rows)
    counted = [(row, record) for row, record in zip(rows, records) if row.policy.counts_unread]
    final_badges, devices = bumped or bump_badges_finding_devices(increments, now_ms)
    with_credentials = {user_pk for _, user_pk, _ in devices}
    if not with_credentials:
        return [0] * len(rows)
    online = {pk: set(online_by_id.get(recipients[pk], ())) for pk in with_credentials}
    # A push carries the badge as of its row: the final badge less the later rows it counts.
    still_to_come = dict(final_badges)
    pushed_per_record: dict[int, int] = {}
    for row, record in reversed(counted):
        others = {pk for pk in with_credentials if pk != row.sender.pk}
        preview = message_object(record, conversation)["preview"]
        payloads = {
            pk: {
                "conversation_id": conversation.pk,
                "conversation_seq": record.conversation_seq,
                "sender_id": row.sender.username,
                "preview": preview,
                "badge": still_to_come.get(pk, 0),
            }
            for pk in others
        }
        pushed_per_record[record.pk] = enqueue_offline_pushes(
            tenant_id=conversation.tenant_id,
            devices=[device for device in devices if device[1] in others],
            online_devices=online,
            payload_for=payloads,
            kind=PushTask.MESSAGE,
            now_ms=now_ms,
        )
        for pk in others:
            still_to_come[pk] = still_to_come.get(pk, 0) - 1
    return [pushed_per_record.get(record.pk, 0) for record in records]


def event_push(
    conversation: Conversation,
    record: MessageRecord,
    entry_kind: str,
    recipients: dict[int, str],
    seqs: dict[int, int],
    *,
    exclude_device: tuple[str, str] | None = None,
) -> UserPush:
    """The EVENT push of a logged row to its mailbox entries (user pk -> mailbox_seq), encoded
    once; pass it to qim.notify.push_on_commit."""
    template = UserMailboxEntry(
        mailbox_seq=0, kind=entry_kind, conversation=conversation, message=record
    )
    event = mailbox_event(template, conversation)
    del event["mailbox_seq"]
    head, tail = event_push_parts(event)
    return UserPush(
        tenant_id=conversation.tenant_id,
        user_ids=list(recipients.values()),
        head=head,
        tail=tail,
        per_user={recipients[pk]: str(seq) for pk, seq in seqs.items()},
        exclude_device=exclude_device,
    )
