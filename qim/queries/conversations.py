"""Reads of conversations, clipped to the reader's membership intervals (ADR-0021)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
from django.db.models import BigIntegerField, Count, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce, Greatest

from qim.conf import limit
from qim.errors import Refused
from qim.node.fit import fit_list
from qim.hooks import history_rendered
from qim.models import Conversation, MembershipInterval, MessageRecord, ReadCursor
from qim.render import message_object

HISTORY_DEFAULT_LIMIT = 50
HISTORY_MAX_LIMIT = 200


def access_conversation(tenant_id: int, conversation_id: str) -> Conversation:
    """The conversation if it is this tenant's; `not_found` for anything else (§3: another
    tenant's ids answer as if they did not exist)."""
    conversation = Conversation.objects.filter(pk=conversation_id, tenant_id=tenant_id).first()
    if conversation is None:
        raise Refused("not_found", "no such conversation")
    return conversation


def intervals_of(conversation_id: str, user_pk: int) -> list[MembershipInterval]:
    return list(
        MembershipInterval.objects.filter(conversation_id=conversation_id, user_id=user_pk).order_by("joined_at")
    )


def access_member_intervals(conversation: Conversation, user_pk: int) -> list[MembershipInterval]:
    """The reader's intervals; `forbidden` for someone who never was a member."""
    intervals = intervals_of(conversation.pk, user_pk)
    if not intervals:
        raise Refused("forbidden", "you are not a member of this conversation")
    return intervals


def require_current_member(conversation: Conversation, user_pk: int) -> None:
    if not MembershipInterval.objects.filter(
        conversation_id=conversation.pk, user_id=user_pk, left_at__isnull=True
    ).exists():
        raise Refused("forbidden", "you are not a member of this conversation")


@dataclass(frozen=True)
class MemberSet:
    """The current members of a conversation as a write under its lock needs them."""

    ids: dict[int, str]  # user pk -> user id
    roles: dict[int, str]
    # The members whose tier is mention_only (their choice, else the group's default).
    quiet: frozenset[int]
    # Only some members were read: those in the `full` tier and the ones asked for by name
    # (a group whose default is mention_only; every other member is in mention_only).
    partial: bool = False

    @classmethod
    def of(cls, conversation: Conversation, rows: Iterable[tuple[int, str, str, str]], *, partial: bool = False) -> MemberSet:
        """From (user pk, user id, role, chosen tier) rows."""
        ids, roles, quiet = {}, {}, set()
        default = group_default_tier(conversation)
        for pk, user_id, role, tier in rows:
            ids[pk], roles[pk] = user_id, role
            if (tier or default) == MembershipInterval.MENTION_ONLY:
                quiet.add(pk)
        return cls(ids, roles, frozenset(quiet), partial)

    def split(self, addressed: set[int]) -> tuple[dict[int, str], dict[int, str]]:
        """(mailbox recipients, live-only members) among these members for a row addressed to
        `addressed` (design §4.3): `full` members and the addressed get an entry, the other
        `mention_only` members the row live."""
        recipients, live = {}, {}
        for pk, user_id in self.ids.items():
            if pk not in self.quiet or pk in addressed:
                recipients[pk] = user_id
            else:
                live[pk] = user_id
        return recipients, live

    def may_manage(self, user_pk: int) -> bool:
        return self.roles.get(user_pk) in (MembershipInterval.OWNER, MembershipInterval.ADMIN)


def group_default_tier(conversation: Conversation) -> str:
    """The tier of members who chose none: the operator's setting, else by size."""
    if conversation.default_tier:
        return conversation.default_tier
    if conversation.member_count > int(limit("large_group_members")):
        return MembershipInterval.MENTION_ONLY
    return MembershipInterval.FULL


def current_member_set(
    conversation: Conversation, *, partial: bool = False,
    also_pks: Iterable[int] = (), also_ids: Iterable[str] = (),
) -> MemberSet:
    """The current members; with `partial`, in a group whose default tier is mention_only,
    only those who chose `full` and the users named by `also_pks`/`also_ids` (a SEND's
    senders and mentions): what a SEND to a 100 000-member group needs, not all of them."""
    rows = MembershipInterval.objects.filter(conversation_id=conversation.pk, left_at__isnull=True)
    partial = partial and group_default_tier(conversation) == MembershipInterval.MENTION_ONLY
    if partial:
        rows = rows.filter(Q(tier=MembershipInterval.FULL) | Q(user_id__in=list(also_pks)) | Q(user__username__in=list(also_ids)))
    return MemberSet.of(conversation, rows.values_list("user_id", "user__username", "role", "tier"), partial=partial)


def current_members(conversation_id: str) -> dict[int, str]:
    """user pk -> user id of everyone who is a member now."""
    return dict(
        MembershipInterval.objects.filter(conversation_id=conversation_id, left_at__isnull=True)
        .values_list("user_id", "user__username")
    )


def visible_seqs(intervals: list[MembershipInterval], field: str = "conversation_seq") -> Q:
    """Rows whose seq lies inside any interval: joined_at < seq < left_at."""
    clause = Q(pk__in=[])
    for interval in intervals:
        part = Q(**{f"{field}__gt": interval.joined_at})
        if interval.left_at is not None:
            part &= Q(**{f"{field}__lt": interval.left_at})
        clause |= part
    return clause


def visible_head(conversation: Conversation, intervals: list[MembershipInterval]) -> int:
    """The last seq the reader can see: the conversation's head, or their leave point - 1."""
    last = intervals[-1]
    if last.left_at is None:
        return conversation.last_seq
    return min(conversation.last_seq, last.left_at - 1)


@dataclass(frozen=True)
class HistoryPage:
    messages: list[dict[str, Any]]
    # The JSON list of `messages`, encoded once while measuring it (qim/node/fit.py).
    messages_json: msgspec.Raw
    has_more: bool


def history(
    conversation: Conversation,
    intervals: list[MembershipInterval],
    *,
    before_seq: int | None,
    after_seq: int | None,
    limit: int | None,
    max_bytes: int,
) -> HistoryPage:
    """Timeline rows ascending by seq; before/after are exclusive. With `after_seq` the page
    is the oldest `limit` rows after it (and before `before_seq`); without, the newest `limit`
    rows before `before_seq` (or the head).

    The rows' JSON takes at most `max_bytes` (one row at least, whatever its size): a page cut
    by size keeps the rows next to the cursor it pages from, the oldest after `after_seq`, the
    newest otherwise. `has_more` says that rows beyond the page exist in that direction,
    whether the limit or the size left them out.
    """
    limit = min(max(1, limit or HISTORY_DEFAULT_LIMIT), HISTORY_MAX_LIMIT)
    rows = MessageRecord.objects.filter(
        visible_seqs(intervals), conversation=conversation, timeline_visible=True
    ).select_related("sender")
    if before_seq is not None:
        rows = rows.filter(conversation_seq__lt=before_seq)
    if after_seq is not None:
        page = list(rows.filter(conversation_seq__gt=after_seq).order_by("conversation_seq")[: limit + 1])
        has_more, page = len(page) > limit, page[:limit]
    else:
        page = list(rows.order_by("-conversation_seq")[: limit + 1])
        has_more, page = len(page) > limit, page[:limit][::-1]
    # The reader's own intervals: they name the viewer, whose own messages carry deadlines.
    viewer = intervals[0].user_id if intervals else None
    messages = _with_app_fields(conversation, [message_object(r, conversation, viewer_user_pk=viewer) for r in page])
    fitted = fit_list(messages, max_bytes, keep_last=after_seq is None)
    return HistoryPage(fitted.items, fitted.json, has_more or len(fitted.items) < len(messages))


def _with_app_fields(conversation: Conversation, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apps add their fields to the page (reactions ride along, protocol.md §5), one query
    for the whole page each."""
    for listener in history_rendered:
        listener(conversation.pk, messages)
    return messages


# An open interval's end as a number, past every seq: the SQL reads `seq < end` for both kinds.
OPEN_END = 2**63 - 1


def open_end() -> Coalesce:
    return Coalesce("left_at", Value(OPEN_END), output_field=BigIntegerField())


def _annotate_unread(intervals: QuerySet[MembershipInterval], cursor: QuerySet[ReadCursor],
                     counted: QuerySet[MessageRecord]) -> QuerySet[MembershipInterval]:
    """`start` (after the join and the cursor), `end`, and `unread`: `counted` between them."""
    read = Coalesce(Subquery(cursor.values("read_conversation_seq")[:1]), Value(0), output_field=BigIntegerField())
    return intervals.annotate(
        start=Greatest("joined_at", read, output_field=BigIntegerField()), end=open_end(),
    ).annotate(unread=Coalesce(Subquery(counted), Value(0), output_field=BigIntegerField()))


def _counted(conversation_id: Any, reader: Any, **narrower: Any) -> QuerySet[MessageRecord]:
    """The count of rows in (start, end) that count as unread for `reader`: counted types,
    not recalled or deleted, not the reader's own; `narrower` filters them further."""
    return (
        MessageRecord.objects.filter(
            conversation_id=conversation_id,
            conversation_seq__gt=OuterRef("start"),
            conversation_seq__lt=OuterRef("end"),
            counts_unread=True,
            state__in=[MessageRecord.NORMAL, MessageRecord.EDITED],
            **narrower,
        )
        .exclude(sender_id=reader)
        .order_by()
        .values("conversation_id")
        .annotate(n=Count("pk"))
        .values("n")
    )


def unread_per_reader(conversation_id: str, first_seq: int, last_seq: int,
                      sender_pk: int | None = None) -> dict[int, int]:
    """user pk -> how many rows with first_seq <= seq <= last_seq (sent by `sender_pk` only,
    when given) count in that user's definitional unread (qim.queries.unread's rule, for every
    reader at once): one query, a correlated count per membership interval that reaches into
    the range. Users it would answer 0 for are left out."""
    cursor = ReadCursor.objects.filter(user_id=OuterRef("user_id"), conversation_id=conversation_id)
    by_sender = {} if sender_pk is None else {"sender_id": sender_pk}
    counted = _counted(conversation_id, OuterRef("user_id"), conversation_seq__gte=first_seq,
                       conversation_seq__lte=last_seq, **by_sender)
    reaching = MembershipInterval.objects.filter(conversation_id=conversation_id, joined_at__lt=last_seq).filter(
        Q(left_at__isnull=True) | Q(left_at__gt=first_seq)
    )
    per_user: dict[int, int] = {}
    rows = _annotate_unread(reaching.order_by(), cursor, counted).filter(unread__gt=0)
    for user_pk, unread in rows.values_list("user_id", "unread"):
        per_user[user_pk] = per_user.get(user_pk, 0) + unread
    return per_user
