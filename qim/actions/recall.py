"""RECALL by the sender within recall_self_window_s: the qim.recall.v1 event is committed
first, then the target row is recalled (design §2, C-5). ModerationService goes through the
same flow (recall_in_design_order, do_log_recall_once)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import F, Q

from qim.actions.anchors import do_log_anchored_event, stored_event_push
from qim.actions.log import Appended, lock_conversation
from qim.clock import now_ms
from qim.content_types import RECALL
from qim.errors import Refused
from qim.infra.faults import fault_point
from qim.hooks import message_recalled
from qim.models import Conversation, MembershipInterval, MessageMention, MessageRecord, ReadCursor, User, UserBadgeState
from qim.notify import UserPush, push_on_commit
from qim.queries.control import access_timeline_message, recall_event_of
from qim.queries.conversations import access_member_intervals
from qim.queries.unread import effective_tier
from qim.windows import recall_deadline_ms


@dataclass(frozen=True)
class LoggedRecall:
    """Step 1's outcome: the qim.recall.v1 event, its push when this call logged it (None
    when the message was recalled already), and whether it did."""

    event: MessageRecord
    push: UserPush | None
    created: bool
    # The live EVENT to members without an entry (design §4.3), sent with `push`.
    live_push: UserPush | None = None


def recall_in_design_order(step_1: Callable[[], LoggedRecall]) -> LoggedRecall:
    """Every recall's flow, self or moderated: `step_1` (lock, check, log the event, via
    do_log_recall_once) commits in its own transaction, then step 2 in another (design §2)."""
    with transaction.atomic():
        logged = step_1()
    complete_recall(logged.event, logged.push, logged.live_push)
    return logged


def check_recall_message(user: User, device_id: str, conversation_id: str, conversation_seq: int) -> int:
    """The sender recalls their message; answers the seq of its qim.recall.v1 event.

    The caller has checked the tenant (access_conversation) and holds no transaction: this
    commits twice, in the design's order. Refuses `forbidden` (never a member, or not the
    sender), `not_found` (no such message; control events are not messages) and
    `window_expired`, writing nothing. A message already recalled answers its existing
    event's seq and writes nothing: a retry after a lost ACK (or a crash) is safe.
    """

    def step_1() -> LoggedRecall:
        conversation = lock_conversation(conversation_id)
        access_member_intervals(conversation, user.pk)
        target = access_timeline_message(conversation, conversation_seq)
        if target.sender_id != user.pk:
            raise Refused("forbidden", "only its sender recalls a message (tenant admins: moderation/recall)")
        return do_log_recall_once(
            conversation, target, actor=user, device_id=device_id, now=now_ms(), deadline_ms=recall_deadline_ms(target)
        )

    return recall_in_design_order(step_1).event.conversation_seq


def do_log_recall_once(
    conversation: Conversation,
    target: MessageRecord,
    *,
    actor: User,
    device_id: str | None,
    now: int,
    deadline_ms: int | None = None,
    moderated: bool = False,
) -> LoggedRecall:
    """Step 1 unless it was done: the target's existing recall event (a retry writes
    nothing, whatever the window), or a new one. Refuses `window_expired` for a new one at or
    past `deadline_ms` (moderation has none). Expects the conversation locked in the
    caller's transaction."""
    earlier = recall_event_of(conversation.pk, target.conversation_seq)
    if earlier is not None:
        return LoggedRecall(earlier, None, created=False)
    if deadline_ms is not None and now >= deadline_ms:
        raise Refused("window_expired", "the recall window of this message has closed")
    appended = do_log_recall(conversation, target, actor=actor, device_id=device_id, now=now, moderated=moderated)
    return LoggedRecall(appended.record, appended.push, created=True, live_push=appended.live_push)


def do_log_recall(
    conversation: Conversation,
    target: MessageRecord,
    *,
    actor: User,
    device_id: str | None,
    now: int,
    moderated: bool = False,
) -> Appended:
    """Step 1: the qim.recall.v1 event at its own seq. Expects the conversation locked in the
    caller's transaction; answers the Appended row with its push still to send."""
    payload: dict = {"target_message_id": target.message_id}
    if moderated:
        payload["moderated"] = True
    return do_log_anchored_event(
        conversation, target, content_type=RECALL, actor=actor, device_id=device_id, payload=payload, now_ms=now
    )


def complete_recall(event: MessageRecord, push: UserPush | None, live_push: UserPush | None = None) -> None:
    """Step 2, after step 1 committed, in a transaction of its own."""
    # Design §2, log first: the recall event is committed, so it is in every recipient's
    # mailbox, and the target's still empty recall_event_conversation_seq tells recovery to
    # finish the job if we die right here (fault point recall.after_log). Recalling the row
    # first would lose the recall for good in that window: nobody would learn of it.
    fault_point("recall.after_log")
    with transaction.atomic():
        do_apply_recall(event, push=push)
        if live_push is not None:
            push_on_commit(live_push)


def do_apply_recall(event: MessageRecord, *, push: UserPush | None = None) -> bool:
    """Recall the event's target: state recalled, payload gone, recall_event_conversation_seq
    set, reactions deleted. Joins the caller's transaction; idempotent (False when the row was
    already recalled). Sends `push` (a new event's) after commit, or else re-issues the stored
    event's push when this call is what recalled the row (recovery)."""
    # Lock order, shared with REACT batches (reactions.actions._lock_target): this UPDATE takes
    # the target's row lock first, the delete below the summary's second. A batch holding the
    # row makes us wait and its rows are then deleted; one arriving after us waits, reads
    # `recalled` and writes nothing. Without the row lock a batch could re-create the summary.
    changed = MessageRecord.objects.filter(
        conversation_id=event.conversation_id,
        conversation_seq=event.target_conversation_seq,
        recall_event_conversation_seq__isnull=True,
    ).update(state=MessageRecord.RECALLED, payload=None, recall_event_conversation_seq=event.conversation_seq)
    if changed:
        drop_app_state_of(event.conversation_id, event.target_conversation_seq)
        _lower_badges_of_readers(event.conversation_id, event.target_conversation_seq, now_ms())
    if push is not None:
        push_on_commit(push)
    elif changed:
        push_on_commit(stored_event_push(event))
    return bool(changed)


def _lower_badges_of_readers(conversation_id: str, conversation_seq: int, now: int) -> int:
    """A recalled message no longer counts as unread (definitional unread), so the stored badge
    of each reader who had it unread drops by one: members whose interval covers it, other than
    its sender, whose read cursor is before it. Answers the badges lowered.

    Runs in step 2's transaction, which holds the target's row lock. The badge rows are locked
    in user order first, as bump_badges takes them, so a SEND bumping the same users cannot
    deadlock with it on PostgreSQL."""
    target = MessageRecord.objects.filter(
        conversation_id=conversation_id, conversation_seq=conversation_seq
    ).values("pk", "sender_id", "counts_unread", "mention_all").get()
    read_past = ReadCursor.objects.filter(conversation_id=conversation_id, read_conversation_seq__gte=conversation_seq)
    # The badge pushes carry counts a `full` member's unread and a `mention_only` member's
    # unread mentions (qim.queries.unread.push_badge): lower it for those it counted in.
    counted_in = Q(effective=MembershipInterval.FULL) if target["counts_unread"] else Q(pk__in=[])
    if target["mention_all"]:
        counted_in |= Q(effective=MembershipInterval.MENTION_ONLY)
    else:
        named = MessageMention.objects.filter(message_id=target["pk"]).values("user_id")
        counted_in |= Q(effective=MembershipInterval.MENTION_ONLY, user_id__in=named)
    readers = (
        MembershipInterval.objects.filter(conversation_id=conversation_id, joined_at__lt=conversation_seq)
        .filter(Q(left_at__isnull=True) | Q(left_at__gt=conversation_seq))
        .exclude(user_id=target["sender_id"])
        .exclude(user_id__in=read_past.values("user_id"))
        .annotate(effective=effective_tier())
        .filter(counted_in)
        .values("user_id")
    )
    badges = UserBadgeState.objects.filter(user_id__in=readers, badge__gt=0)
    if connection.vendor == "postgresql":
        list(badges.select_for_update().order_by("user_id").values_list("pk", flat=True))
    return badges.update(badge=F("badge") - 1, updated_at_ms=now)


def drop_app_state_of(conversation_id: str, conversation_seq: int) -> None:
    """What apps keep about a recalled message goes in the caller's transaction (design §4:
    reactions are deleted physically, so a recalled row never keeps counts). The caller must
    hold the message's row lock already (REACT batches take it before the summary's)."""
    for listener in message_recalled:
        listener(conversation_id, conversation_seq)
