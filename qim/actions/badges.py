"""Lowering stored badges when counted rows leave the log (retention) or are blanked
(erasure), set-based per batch."""

from __future__ import annotations

from collections import defaultdict

from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Greatest

from qim.models import UserBadgeState
from qim.queries.conversations import unread_per_reader


def do_uncount_rows(conversation_id: str, first_seq: int, last_seq: int, now_ms: int) -> int:
    """Before the rows first_seq..last_seq of a conversation are deleted, lower each reader's stored badge by how many of them were unread for that
    reader (definitional unread: the badge a push carries counts only messages that exist);
    never below 0. Answers the badge rows lowered.

    Joins the caller's transaction, which must hold those rows' locks (taken before any badge
    lock, the order recall keeps), so a recall or edit of one of them waits or has committed
    and the count is exact. Badge rows are locked in user order, as bump_badges takes them,
    so a SEND bumping the same users cannot deadlock with it; a MARK_READ recomputing a
    badge meanwhile recounts from what exists after this commits."""
    return lower_badges(unread_per_reader(conversation_id, first_seq, last_seq), now_ms)


def lower_badges(per_user: dict[int, int], now_ms: int) -> int:
    """badge -= per_user[user] for each user, never below 0, the rows locked in user order
    (as do_uncount_rows says; erasure calls it once per batch for all its conversations)."""
    if not per_user:
        return 0
    if connection.vendor == "postgresql":
        locked = UserBadgeState.objects.filter(user_id__in=list(per_user), badge__gt=0).select_for_update()
        list(locked.order_by("user_id").values_list("pk", flat=True))
    by_count: dict[int, list[int]] = defaultdict(list)
    for user_pk, count in per_user.items():
        by_count[count].append(user_pk)
    lowered = 0
    for count, user_pks in sorted(by_count.items()):
        lowered += UserBadgeState.objects.filter(user_id__in=user_pks, badge__gt=0).update(
            badge=Greatest(F("badge") - count, Value(0)), updated_at_ms=now_ms
        )
    return lowered
