"""The pushes of a log append: offline PushTasks with badges (counted rows and mentions),
the EVENT push to the mailbox recipients, and the live EVENT to members without an entry
(design §4.3). qim/actions/log.py calls them under the conversation's lock."""

from __future__ import annotations

from collections.abc import Sequence
from qim.actions.log_postgresql import Bumped
from qim.actions.log_rows import AllMembersBut, LogRow
from qim.actions.mailbox import bump_badges_finding_devices, enqueue_offline_pushes, event_push_parts
from qim.infra import codec
from qim.models import Conversation, MessageRecord, PushTask, UserMailboxEntry
from qim.node.conversation_push import ConversationPush
from qim.notify import UserPush
from qim.queries.online import OnlineDevices
from qim.render import mailbox_event, message_object


def count_for_others(
    conversation: Conversation,
    rows: Sequence[LogRow],
    records: Sequence[MessageRecord],
    recipients: dict[int, str],
    now_ms: int,
    online_by_id: OnlineDevices,
    increments: dict[int, int] | None,
    bumped: Bumped | None,
    quiet: frozenset[int] = frozenset(),
) -> list[int]:
    """Badges and offline pushes of the counted rows: each recipient's badge grows by
    `increments` (already, when `bumped` holds what that answered); answers the PushTasks
    queued per row. A `quiet` recipient is pushed only the rows that mention them; a push
    for a mention is high priority and says so. Asks no one who is online: the row lock is
    held (`online_by_id` was asked before it, qim.queries.online)."""
    if increments is None:
        return [0] * len(rows)
    counted = [
        (row, record) for row, record in zip(rows, records)
        if row.policy.counts_unread or row.mention_all or row.mentioned
    ]
    final_badges, devices = bumped or bump_badges_finding_devices(increments, now_ms)
    with_credentials = {user_pk for _, user_pk, _ in devices}
    if not with_credentials:
        return [0] * len(rows)
    online = {pk: set(online_by_id.get(recipients[pk], ())) for pk in with_credentials}
    # A push carries the badge as of its row: the final badge less the later rows it counts.
    still_to_come = dict(final_badges)
    pushed_per_record: dict[int, int] = {}
    for row, record in reversed(counted):
        others = {
            pk for pk in with_credentials
            if pk != row.sender.pk and (row.mentions(pk) if pk in quiet else row.policy.counts_unread)
        }
        preview = message_object(record, conversation)["preview"]
        payloads = {pk: push_payload(record, row.sender.username, preview, still_to_come.get(pk, 0), mention=row.mentions(pk)) for pk in others}
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


def push_payload(record: MessageRecord, sender_id: str, preview: str, badge: int, *, mention: bool) -> dict:
    """An offline message push's payload; a mention's is high priority and says so."""
    payload = {
        "conversation_id": record.conversation_id,
        "conversation_seq": record.conversation_seq,
        "sender_id": sender_id,
        "preview": preview,
        "badge": badge,
    }
    if mention:
        payload.update(mention=True, priority="high")
    return payload


def _event_of(conversation: Conversation, record: MessageRecord, entry_kind: str) -> dict:
    """The row's mailbox event without a mailbox_seq: the body both EVENT pushes share,
    rendered without a viewer (one body for every recipient)."""
    template = UserMailboxEntry(mailbox_seq=0, kind=entry_kind, conversation=conversation, message=record)
    event = mailbox_event(template, conversation)
    del event["mailbox_seq"]
    return event


def live_push(
    conversation: Conversation, record: MessageRecord, entry_kind: str, live: dict[int, str] | AllMembersBut,
) -> UserPush | ConversationPush:
    """The row as a live EVENT (no mailbox_seq: there is no entry to sync) to members who get
    no mailbox entry for it, encoded once for all of them: named (a UserPush), or in a large
    group every member but those with an entry (a ConversationPush, resolved by each node)."""
    event = _event_of(conversation, record, entry_kind)
    event["live"] = True
    text = codec.encode({"type": "EVENT", "event": event})
    if isinstance(live, AllMembersBut):
        return ConversationPush(
            tenant_id=conversation.tenant_id, conversation_id=conversation.pk,
            members_version=conversation.members_version, text=text, exclude=sorted(live.exclude),
        )
    return UserPush(tenant_id=conversation.tenant_id, user_ids=list(live.values()), text=text)


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
    head, tail = event_push_parts(_event_of(conversation, record, entry_kind))
    return UserPush(
        tenant_id=conversation.tenant_id,
        user_ids=list(recipients.values()),
        head=head,
        tail=tail,
        per_user={recipients[pk]: str(seq) for pk, seq in seqs.items()},
        exclude_device=exclude_device,
    )
