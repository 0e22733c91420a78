"""Control events that anchor on a target row (qim.recall.v1, qim.edit.v1): logging one, and
re-issuing the EVENT push of one already logged (recovery, design §2)."""

from __future__ import annotations

from qim.actions.log import Appended, append_to_log
from qim.actions.log_pushes import event_push
from qim.content_types import builtin_policy
from qim.infra import codec
from qim.models import Conversation, MembershipInterval, MessageRecord, User, UserMailboxEntry
from qim.notify import UserPush
from qim.queries.control import anchor_recipients
from qim.queries.conversations import group_default_tier


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
    also: dict[int, str] | None = None,
    carried_mentions: tuple[str, bool] | None = None,
) -> Appended:
    """Append a recall/edit event at its own seq, anchored on `target`, to the mailbox of
    everyone who can see the target (queries.control.anchor_recipients).

    Expects the conversation locked in the caller's transaction. Its entries never reach the
    acting device (that device has the ACK). The push is deferred (`Appended.push`): it leaves
    with step 2, so a client that reacts to the EVENT finds the target row updated.
    In a `mention_only` tier (design §4.3) only those who had the target in their mailbox,
    `full` members, and `also` (users an edit newly mentions) get an entry; the others who can
    see the target get it live (`Appended.live_push`). `carried_mentions` are an edit's new
    mentions, on its row (and so in its EVENT) from the start.
    """
    recipients, live = anchor_audience(conversation, target, also or {})
    return append_to_log(
        conversation,
        sender=actor,
        sender_device_id=device_id or "",
        policy=builtin_policy(content_type),
        payload_json=payload_json if payload_json is not None else codec.encode(payload),
        recipients=recipients,
        now_ms=now_ms,
        kind=MessageRecord.CONTROL,
        target_conversation_seq=target.conversation_seq,
        origin_device_id=device_id or None,
        defer_push=True,
        live=live,
        carried_mentions=carried_mentions,
    )


def anchor_audience(
    conversation: Conversation, target: MessageRecord, also: dict[int, str]
) -> tuple[dict[int, str], dict[int, str]]:
    """(mailbox recipients, live-only members) of an event anchored on `target`: of everyone
    who can see it (anchor_recipients), those in the `full` tier or with an entry of the
    target get an entry, as do `also`; current members among the rest get it live."""
    seeing = anchor_recipients(conversation.pk, target.conversation_seq)
    quiet = {
        pk for pk, tier in MembershipInterval.objects.filter(
            conversation=conversation, user_id__in=list(seeing), left_at__isnull=True
        ).values_list("user_id", "tier")
        if (tier or group_default_tier(conversation)) == MembershipInterval.MENTION_ONLY
    }
    if quiet:
        quiet -= set(UserMailboxEntry.objects.filter(message=target, user_id__in=list(quiet)).values_list("user_id", flat=True))
    recipients = {pk: uid for pk, uid in seeing.items() if pk not in quiet}
    recipients.update(also)
    return recipients, {pk: uid for pk, uid in seeing.items() if pk not in recipients}


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
