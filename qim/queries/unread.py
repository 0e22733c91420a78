"""Definitional unread and mention counts from running counts on the log (issue #34).

Unread of one membership interval (design Substrate, ADR-0021): the counts_unread rows in
(s, e], where s = max(joined_at, read cursor) and e = min(head, left_at - 1), less the
reader's own and the recalled or tombstoned ones. Every log row carries two running counts
(qim/actions/log.py writes them): `counted_total`, the conversation's counts_unread rows up to
it, and `sender_counted_total`, those of its sender. So

    unread = [C(e) - C(s)] - [O(e) - O(s)] - R(s, e)

where C(x) and O(x) are read off one row each (an index seek, never a count of the history)
and R counts only the recalled/tombstoned rows in (s, e] (a partial index holds just those).
C(x) is read from the first row after x, less that row's own count: a seq whose row
retention deleted (always a prefix of the log) then reads as the first kept row, so deleted
rows are never unread. The same for O(x), from the reader's first row after x.

mention_count counts the reader's MessageMention rows and the @all rows in (s, e] (both
small sets, each behind its own index), less recalled ones and the reader's own.
"""

from __future__ import annotations

from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    Exists,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Greatest

from qim.conf import limit
from qim.models import MembershipInterval, MessageMention, MessageRecord, ReadCursor
from qim.queries.conversations import group_default_tier

_GONE = [MessageRecord.RECALLED, MessageRecord.DELETED]
_BIG = BigIntegerField()


def _own_count() -> Case:
    """The row's own contribution to the running counts: 1 when it counts."""
    return Case(When(counts_unread=True, then=Value(1)), default=Value(0), output_field=_BIG)


def _first_after(position: str) -> QuerySet[MessageRecord]:
    """The conversation's rows after the outer `position`, first first."""
    return MessageRecord.objects.filter(
        conversation_id=OuterRef("conversation_id"), conversation_seq__gt=OuterRef(position)
    ).order_by("conversation_seq")


def _counted_upto(position: str) -> Coalesce:
    """C(position): counts_unread rows of the conversation up to it (the head's when no row
    follows)."""
    first = _first_after(position).annotate(before=F("counted_total") - _own_count()).values("before")[:1]
    return Coalesce(Subquery(first), F("conversation__counted_total"), output_field=_BIG)


def _own_upto(position: str) -> Coalesce:
    """O(position): the reader's counts_unread rows up to it."""
    own = MessageRecord.objects.filter(conversation_id=OuterRef("conversation_id"), sender_id=OuterRef("user_id"))
    first = (
        own.filter(conversation_seq__gt=OuterRef(position)).order_by("conversation_seq")
        .annotate(before=F("sender_counted_total") - _own_count()).values("before")[:1]
    )
    last = own.order_by("-conversation_seq").values("sender_counted_total")[:1]
    return Coalesce(Subquery(first), Subquery(last), Value(0), output_field=_BIG)


def _in_window(**narrower: object) -> Q:
    return Q(conversation_seq__gt=OuterRef("start"), conversation_seq__lte=OuterRef("end"), **narrower)


def _count_of(rows: QuerySet) -> Coalesce:
    counted = rows.order_by().values("conversation_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), Value(0), output_field=_BIG)


def _gone_in_window() -> Coalesce:
    """R(s, e): recalled or tombstoned counted rows of others in the window."""
    rows = MessageRecord.objects.filter(
        _in_window(state__in=_GONE, counts_unread=True), conversation_id=OuterRef("conversation_id")
    ).exclude(sender_id=OuterRef("user_id"))
    return _count_of(rows)


def _mentions_in_window() -> Coalesce:
    """The reader's unread mentions: their mention rows, and @all rows that do not also name
    them, of others' messages still shown, in the window."""
    named = MessageMention.objects.filter(
        _in_window(), user_id=OuterRef("user_id"), conversation_id=OuterRef("conversation_id"),
    ).exclude(message__state__in=_GONE).exclude(message__sender_id=OuterRef("user_id"))
    also_named = MessageMention.objects.filter(message_id=OuterRef("pk"), user_id=OuterRef(OuterRef("user_id")))
    everyone = (
        MessageRecord.objects.filter(
            _in_window(mention_all=True, kind=MessageRecord.MESSAGE), conversation_id=OuterRef("conversation_id")
        )
        .exclude(state__in=_GONE).exclude(sender_id=OuterRef("user_id")).exclude(Exists(also_named))
    )
    return Coalesce(
        Subquery(named.order_by().values("user_id").annotate(n=Count("pk")).values("n")), Value(0), output_field=_BIG
    ) + _count_of(everyone)


def with_unread(intervals: QuerySet[MembershipInterval]) -> QuerySet[MembershipInterval]:
    """Each MembershipInterval row with `unread` and `mention_count` inside it (module doc),
    and `start`/`end`, its window. Intervals of one user never overlap (a join needs a
    non-member), so the figures of a user's intervals add up."""
    cursor = ReadCursor.objects.filter(user_id=OuterRef("user_id"), conversation_id=OuterRef("conversation_id"))
    read = Coalesce(Subquery(cursor.values("read_conversation_seq")[:1]), Value(0), output_field=_BIG)
    windowed = intervals.annotate(
        start=Greatest("joined_at", read, output_field=_BIG),
        end=Coalesce(F("left_at") - 1, F("conversation__last_seq"), output_field=_BIG),
    )
    empty = Q(start__gte=F("end"))
    counted = (
        _counted_upto("end") - _counted_upto("start") - (_own_upto("end") - _own_upto("start")) - _gone_in_window()
    )
    return windowed.annotate(
        unread=Case(When(empty, then=Value(0)), default=Greatest(counted, Value(0), output_field=_BIG), output_field=_BIG),
        mention_count=Case(When(empty, then=Value(0)), default=_mentions_in_window(), output_field=_BIG),
    )


def effective_tier() -> Case:
    """An interval's tier as SQL: the member's choice, else the group's default, else by size."""
    large = int(limit("large_group_members"))
    return Case(
        When(~Q(tier=""), then=F("tier")),
        When(~Q(conversation__default_tier=""), then=F("conversation__default_tier")),
        When(conversation__member_count__gt=large, then=Value(MembershipInterval.MENTION_ONLY)),
        default=Value(MembershipInterval.FULL),
    )


def tier_of(interval: MembershipInterval) -> str:
    """effective_tier of one interval read with its conversation."""
    return interval.tier or group_default_tier(interval.conversation)


def unread_in(intervals: QuerySet[MembershipInterval]) -> int:
    """Definitional unread summed over some intervals, in one query."""
    return sum(with_unread(intervals.order_by()).values_list("unread", flat=True))


def unread_count(conversation_id: str, user_pk: int) -> int:
    """Definitional unread of one conversation for one reader, over their intervals in it."""
    return unread_in(MembershipInterval.objects.filter(user_id=user_pk, conversation_id=conversation_id))


def total_unread(user_pk: int) -> int:
    """The badge CONVERSATION_LIST carries: unread over every conversation the user is or
    was in."""
    return unread_in(MembershipInterval.objects.filter(user_id=user_pk))


def push_badge(user_pk: int) -> int:
    """The badge pushes carry (UserBadgeState): unread of the user's `full` conversations and
    unread mentions of their `mention_only` ones, the same things a message bumps it for
    (qim/actions/log.py), so a 100 000-member group the user only follows for mentions does not
    hold the phone's badge at thousands."""
    rows = with_unread(MembershipInterval.objects.filter(user_id=user_pk).order_by()).annotate(
        effective=effective_tier()
    ).values_list("effective", "unread", "mention_count")
    return sum(mentions if tier == MembershipInterval.MENTION_ONLY else unread for tier, unread, mentions in rows)

