"""Reads behind control events: anchor targets and who sees them."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from qim.content_types import EDIT, RECALL
from qim.errors import Refused
from qim.models import Conversation, MembershipInterval, MessageRecord


def access_timeline_message(conversation: Conversation, conversation_seq: int) -> MessageRecord:
    """The message row at that seq; `not_found` for control events (membership, recall, edit)
    and seqs the conversation never had. Callers check who may act on it."""
    record = (
        MessageRecord.objects.select_related("sender")
        .filter(
            conversation=conversation,
            conversation_seq=conversation_seq,
            kind=MessageRecord.MESSAGE,
            timeline_visible=True,
        )
        .first()
    )
    if record is None:
        raise Refused("not_found", f"no message {conversation_seq} in this conversation")
    return record


def anchor_recipients(conversation_id: str, target_seq: int) -> dict[int, str]:
    """user pk -> user id of everyone who can see the target: whose membership interval covers
    its seq (joined_at < seq < left_at), members or not any more. A member who joined later
    never sees the target, so is not told about it either."""
    covering = Q(joined_at__lt=target_seq) & (Q(left_at__isnull=True) | Q(left_at__gt=target_seq))
    return dict(
        MembershipInterval.objects.filter(covering, conversation_id=conversation_id)
        .values_list("user_id", "user__username")
    )


def _control_events_of(conversation_id: str, target_seq: int, content_type: str) -> QuerySet[MessageRecord]:
    """The logged control events of one type that target a message, applied to it or not yet
    (the crash window of design §2)."""
    return MessageRecord.objects.filter(
        conversation_id=conversation_id,
        target_conversation_seq=target_seq,
        kind=MessageRecord.CONTROL,
        content_type=content_type,
    )


def recall_event_of(conversation_id: str, target_seq: int) -> MessageRecord | None:
    """The logged qim.recall.v1 event of a target; there is at most one."""
    return _control_events_of(conversation_id, target_seq, RECALL).order_by("conversation_seq").first()


def latest_edit_event_of(conversation_id: str, target_seq: int) -> MessageRecord | None:
    """The newest logged qim.edit.v1 event of a target."""
    return _control_events_of(conversation_id, target_seq, EDIT).order_by("-conversation_seq").first()
