"""Appending to a conversation's commit log: seq, row, mailboxes, badges, pushes, in one
transaction. Messages and logged control events (membership, recall, edit) all come here."""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import async_to_sync

from qim.actions.mailbox import (
    bump_badges,
    enqueue_offline_pushes,
    event_push_parts,
    push_capable_devices,
    write_mailbox_entries,
)
from qim.content_types import OWN_SEQ, TypePolicy
from qim.models import Conversation, MessageRecord, PushTask, User, UserMailboxEntry
from qim.notify import UserPush, push_on_commit
from qim.render import mailbox_event, message_object


def lock_conversation(conversation_id: str) -> Conversation:
    """Take the conversation's row lock: the seq allocator (SQLite: the IMMEDIATE write lock)."""
    return Conversation.objects.select_for_update().get(pk=conversation_id)


@dataclass(frozen=True)
class Appended:
    record: MessageRecord
    mailbox_seqs: dict[int, int]
    push_tasks: int
    # The EVENT push of this row; already queued on commit unless `defer_push`.
    push: UserPush | None = None


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
) -> Appended:
    """Write the next row of the log and diffuse it to `recipients` (user pk -> user id).

    Expects `conversation` locked by `lock_conversation` in the caller's transaction.
    Emits (after commit) one EVENT per recipient, grouped by node. Counted types also bump the
    badges of recipients other than the sender and queue a PushTask per offline device with
    push credentials. With `origin_device_id` the entries are never delivered to that device of
    the sender (protocol.md §5). With `defer_push` the caller sends `Appended.push`
    itself, later (recall and edit push once the target row is updated, design §2).
    """
    seq = conversation.last_seq + 1
    conversation.last_seq = seq
    update_fields = ["last_seq"]
    # anchor_target rows never move the latest position (design §2: two recalls in a row),
    # whatever their type says; the row records the effective flag for the list projection.
    moves_position = policy.affects_session_order and policy.anchor_mode == OWN_SEQ
    if moves_position:
        conversation.last_activity_seq, conversation.last_activity_ms = seq, now_ms
        update_fields += ["last_activity_seq", "last_activity_ms"]
    conversation.save(update_fields=update_fields)
    record = MessageRecord.objects.create(
        tenant_id=conversation.tenant_id,
        conversation=conversation,
        conversation_seq=seq,
        kind=kind,
        sender=sender,
        sender_device_id=sender_device_id,
        client_msg_id=client_msg_id,
        content_type=policy.content_type,
        payload=payload_json,
        sent_at_ms=now_ms,
        target_conversation_seq=target_conversation_seq,
        counts_unread=policy.counts_unread,
        affects_session_order=moves_position,
        timeline_visible=policy.timeline_visible,
    )
    entry_kind = UserMailboxEntry.MESSAGE if kind == MessageRecord.MESSAGE else UserMailboxEntry.CONTROL
    seqs = write_mailbox_entries(
        tenant_id=conversation.tenant_id,
        conversation_id=conversation.pk,
        message_id=record.pk,
        kind=entry_kind,
        recipients=recipients,
        now_ms=now_ms,
        origin_device_id=origin_device_id,
        origin_user_pk=sender.pk,
    )
    pushed = 0
    if policy.counts_unread:
        pushed = _count_for_others(conversation, record, recipients, sender.pk, now_ms)
    exclude = (sender.username, origin_device_id) if origin_device_id else None
    push = event_push(conversation, record, entry_kind, recipients, seqs, exclude_device=exclude)
    if not defer_push:
        push_on_commit(push)
    return Appended(record=record, mailbox_seqs=seqs, push_tasks=pushed, push=push)


def _count_for_others(
    conversation: Conversation, record: MessageRecord, recipients: dict[int, str], sender_pk: int, now_ms: int
) -> int:
    others = [pk for pk in recipients if pk != sender_pk]
    badges = bump_badges(others, now_ms)
    devices = push_capable_devices(others)
    with_credentials = {user_pk for _, user_pk, _ in devices}
    if not with_credentials:
        return 0
    from qim.gateway.node import get_node

    online_by_id = async_to_sync(get_node().directory.online_devices)(
        conversation.tenant_id, [recipients[pk] for pk in with_credentials]
    )
    online = {pk: online_by_id.get(recipients[pk], set()) for pk in with_credentials}
    preview = message_object(record, conversation)["preview"]
    payloads = {
        pk: {
            "conversation_id": conversation.pk,
            "conversation_seq": record.conversation_seq,
            "sender_id": record.sender.username,
            "preview": preview,
            "badge": badges.get(pk, 0),
        }
        for pk in with_credentials
    }
    return enqueue_offline_pushes(
        tenant_id=conversation.tenant_id,
        devices=devices,
        online_devices=online,
        payload_for=payloads,
        kind=PushTask.MESSAGE,
        now_ms=now_ms,
    )


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
