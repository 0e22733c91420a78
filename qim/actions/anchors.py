"""Control events that anchor on a target row (qim.recall.v1, qim.edit.v1): logging one, and
re-issuing the EVENT push of one already logged (recovery, design §2)."""

from __future__ import annotations

from qim.actions.log import Appended, append_to_log
from qim.actions.log_pushes import event_push
from qim.content_types import builtin_policy
from qim.infra import codec
from qim.models import Conversation, MessageRecord, User, UserMailboxEntry
from qim.notify import UserPush
from qim.queries.control import anchor_recipients


def do_log_anchored_event(
    conversation: Conversation,
    target: MessageRecord,
    *,
    content_type: str,
    actor: User,
    device_id: str | None,
    payload: dict | None = None,
    payload_json: str | None = None,
    now_ms: int,
) -> Appended:
    """Append a recall/edit event at its own seq, anchored on `target`, to the mailbox of
    everyone who can see the target (queries.control.anchor_recipients).

    Expects the conversation locked in the caller's transaction. Its entries never reach the
    acting device (that device has the ACK). The push is deferred (`Appended.push`): it leaves
    with step 2, so a client that reacts to the EVENT finds the target row updated.
    """
    return append_to_log(
        conversation,
        sender=actor,
        sender_device_id=device_id or "",
        policy=builtin_policy(content_type),
        payload_json=payload_json if payload_json is not None else codec.encode(payload),
        recipients=anchor_recipients(conversation.pk, target.conversation_seq),
        now_ms=now_ms,
        kind=MessageRecord.CONTROL,
        target_conversation_seq=target.conversation_seq,
        origin_device_id=device_id or None,
        defer_push=True,
    )


def stored_event_push(event: MessageRecord) -> UserPush:
    """The EVENT push of a logged event rebuilt from its mailbox entries, to re-issue it to the
    devices online now (the original push may have died with its node)."""
    entries = list(
        UserMailboxEntry.objects.filter(message=event).values_list("user_id", "user__username", "mailbox_seq", "origin_device_id")
    )
    recipients = {pk: username for pk, username, _, _ in entries}
    seqs = {pk: seq for pk, _, seq, _ in entries}
    origin = next((device for pk, _, _, device in entries if device and pk == event.sender_id), None)
    exclude = (event.sender.username, origin) if origin else None
    return event_push(
        event.conversation, event, UserMailboxEntry.CONTROL, recipients, seqs, exclude_device=exclude
    )
