"""REACT's write path (design §4): idempotent per (tenant, conversation, seq, user, key).

Never a UserMailboxEntry, never an unread, badge, order or preview change, never a PushTask:
the only rows touched are this message's summary and its details or fingerprints.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from qim.clock import now_ms
from qim.conf import limit
from qim.errors import Refused
from qim.models import Conversation, MembershipInterval, MessageRecord, User
from reactions.models import MessageReaction, MessageReactionSummary, ReactionFingerprint

# Member counts of big groups change rarely; counting 100 000 intervals on every REACT would not.
_MEMBER_COUNT_TTL_S = 5.0
_member_counts: dict[str, tuple[float, int]] = {}


@dataclass(frozen=True)
class ReactOutcome:
    conversation_id: str
    conversation_seq: int
    counts: dict[str, int]
    summary_version: int
    changed: bool


def member_count(conversation_id: str) -> int:
    cached = _member_counts.get(conversation_id)
    if cached is not None and time.monotonic() - cached[0] < _MEMBER_COUNT_TTL_S:
        return cached[1]
    count = MembershipInterval.objects.filter(conversation_id=conversation_id, left_at__isnull=True).count()
    _member_counts[conversation_id] = (time.monotonic(), count)
    return count


def fingerprint(user_pk: int, reaction_key: str) -> int:
    digest = hashlib.blake2b(f"{user_pk}\x00{reaction_key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def check_can_react(conversation: Conversation, user: User, seq: int) -> MessageRecord:
    """The target message, if `user` can see it: `forbidden` for outsiders, `not_found` for
    a seq that is no message (or a recalled or deleted one)."""
    intervals = MembershipInterval.objects.filter(conversation=conversation, user=user)
    if not intervals.exists():
        raise Refused("forbidden", "you are not a member of this conversation")
    if not any(i.covers(seq) for i in intervals):
        raise Refused("not_found", f"no message {seq} that you can see")
    target = MessageRecord.objects.filter(
        conversation=conversation, conversation_seq=seq, kind=MessageRecord.MESSAGE
    ).first()
    if target is None or target.state in (MessageRecord.RECALLED, MessageRecord.DELETED):
        raise Refused("not_found", f"no message {seq} to react to")
    return target


def _locked_summary(conversation: Conversation, seq: int) -> MessageReactionSummary:
    """The message's summary under its row lock (created on first use): REACTs to one message
    serialize here, on every node."""
    try:
        with transaction.atomic():
            MessageReactionSummary.objects.get_or_create(
                conversation=conversation, conversation_seq=seq, defaults={"tenant_id": conversation.tenant_id}
            )
    except IntegrityError:
        pass  # another REACT made it first
    return MessageReactionSummary.objects.select_for_update().get(conversation=conversation, conversation_seq=seq)


def _details_allowed(conversation: Conversation, summary: MessageReactionSummary) -> bool:
    return (
        member_count(conversation.pk) <= limit("reaction_detail_max_members")
        and summary.detail_rows < limit("reaction_detail_max_per_message")
    )


def _add(conversation: Conversation, summary: MessageReactionSummary, user: User, key: str) -> bool:
    seq = summary.conversation_seq
    if MessageReaction.objects.filter(conversation=conversation, conversation_seq=seq, user=user, reaction_key=key).exists():
        return False
    fp = fingerprint(user.pk, key)
    if ReactionFingerprint.objects.filter(summary=summary, fingerprint=fp).exists():
        return False
    if _details_allowed(conversation, summary):
        MessageReaction.objects.create(
            tenant_id=conversation.tenant_id, conversation=conversation, conversation_seq=seq,
            user=user, reaction_key=key, created_at_ms=now_ms(),
        )
        summary.detail_rows += 1
    else:
        ReactionFingerprint.objects.create(summary=summary, fingerprint=fp)
    return True


def _remove(conversation: Conversation, summary: MessageReactionSummary, user: User, key: str) -> bool:
    seq = summary.conversation_seq
    deleted, _ = MessageReaction.objects.filter(
        conversation=conversation, conversation_seq=seq, user=user, reaction_key=key
    ).delete()
    if deleted:
        summary.detail_rows -= 1
        return True
    deleted, _ = ReactionFingerprint.objects.filter(summary=summary, fingerprint=fingerprint(user.pk, key)).delete()
    return bool(deleted)


def do_react(conversation: Conversation, user: User, seq: int, key: str, action: str) -> ReactOutcome:
    """Add or remove one reaction; opens its own transaction.

    A repeated add or a remove of something absent succeeds and changes nothing (the
    outcome says `changed: False` and the version stays). Raises Refused as check_can_react.
    """
    with transaction.atomic():
        check_can_react(conversation, user, seq)
        summary = _locked_summary(conversation, seq)
        changed = (_add if action == "add" else _remove)(conversation, summary, user, key)
        if changed:
            counts = dict(summary.counts)
            counts[key] = counts.get(key, 0) + (1 if action == "add" else -1)
            if counts[key] <= 0:
                del counts[key]
            summary.counts = counts
            summary.summary_version += 1
            summary.updated_at_ms = now_ms()
            summary.save(update_fields=["counts", "summary_version", "detail_rows", "updated_at_ms"])
    return ReactOutcome(conversation.pk, seq, dict(summary.counts), summary.summary_version, changed)


def do_delete_reactions(conversation_id: str, conversation_seq: int) -> int:
    """Recall or deletion of the message: its aggregate and details go, physically (§4)."""
    details, _ = MessageReaction.objects.filter(conversation_id=conversation_id, conversation_seq=conversation_seq).delete()
    summaries, _ = MessageReactionSummary.objects.filter(
        conversation_id=conversation_id, conversation_seq=conversation_seq
    ).delete()  # fingerprints cascade
    return details + summaries
