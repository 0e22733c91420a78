"""CONVERSATIONS: the session list, newest activity first, a page at a time (protocol.md §6.4),
clipped to the reader's membership intervals (ADR-0021)."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import msgspec
from django.db.models import OuterRef, Q, Subquery

from qim.errors import Refused
from qim.node.fit import fit_chunks
from qim.models import Conversation, MembershipInterval, MessageRecord, User
from qim.queries.conversations import open_end, visible_head
from qim.queries.unread import tier_of, with_unread
from qim.render import message_object

# Items built at a time (one query for their previews): a page is built chunk by chunk until the
# frame cap is reached. Its OR of (conversation, seq) pairs stays under SQLite's expression
# depth of 1000.
CHUNK = 200
# Ids per IN list: under SQLite's bound on host parameters in any build.
IN_BATCH = 900


@dataclass(frozen=True)
class ListItem:
    conversation_id: str
    kind: str
    title: str
    last_seq: int
    last_activity_ms: int
    preview: str
    unread: int
    member: bool
    # The reader's role and tier in it (their last interval's), and their unread mentions.
    role: str
    tier: str
    mention_count: int

    def frame(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class ListCursor:
    """A position in the list's order, exclusive: CONVERSATIONS `before` and `next_before`."""

    last_activity_ms: int
    conversation_id: str

    def frame(self) -> dict[str, Any]:
        return {"last_activity_ms": self.last_activity_ms, "conversation_id": self.conversation_id}


@dataclass(frozen=True)
class ConversationPage:
    items: list[dict[str, Any]]
    # The JSON list of `items`, encoded once while measuring it (qim/node/fit.py).
    items_json: msgspec.Raw
    # Definitional unread summed over every conversation of the list, not only this page's.
    badge: int
    has_more: bool

    def next_before(self) -> ListCursor | None:
        """The cursor of the last item when more follow it."""
        if not self.has_more:
            return None
        last = self.items[-1]
        return ListCursor(last["last_activity_ms"], last["conversation_id"])


@dataclass
class _Entry:
    """A conversation of the reader's list before its item is built: what orders it."""

    conversation: Conversation
    intervals: list[MembershipInterval] = field(default_factory=list)
    unread: int = 0
    mention_count: int = 0
    # The newest affects_session_order row the reader can see; 0 and 0 when there is none.
    activity_seq: int = 0
    activity_ms: int = 0

    def key(self) -> tuple[int, str]:
        return (self.activity_ms, self.conversation.pk)


def conversation_page(
    user: User, *, before: ListCursor | None = None, limit: int | None = None, max_bytes: int
) -> ConversationPage:
    """Every conversation the user is or was in, newest activity first (ties by id, descending),
    after `before` (exclusive) and at most `limit` of them, whose items' JSON takes at most
    `max_bytes` (one item at least); `has_more` when the list goes on past the page.

    The order comes from set-based reads (the conversation rows' activity columns, one query
    for the few conversations whose activity the reader's intervals clip); previews are read
    only for the items of the page. `bad_frame` for a cursor naming no conversation of the list.

    The order moves while a client pages: a conversation with new activity jumps to the top, so
    one not yet listed can be skipped; one is listed twice only if its activity time went back
    (nodes' clocks disagreeing). Clients ask for the first page again on the EVENT that moved it.
    """
    entries = _entries(user)
    ordered = sorted(entries.values(), key=_Entry.key, reverse=True)
    if before is not None:
        if before.conversation_id not in entries:
            raise Refused("bad_frame", "before names no conversation of your list")
        bound = (before.last_activity_ms, before.conversation_id)
        ordered = [entry for entry in ordered if entry.key() < bound]
    candidates = ordered if limit is None else ordered[:limit]
    fitted, _ = fit_chunks(_item_chunks(candidates), max_bytes)
    return ConversationPage(
        items=fitted.items,
        items_json=fitted.json,
        badge=sum(entry.unread for entry in entries.values()),
        has_more=len(fitted.items) < len(ordered),
    )


def _entries(user: User) -> dict[str, _Entry]:
    """The reader's conversations with their intervals, unread counts and newest visible
    activity: two queries, the second only for conversations whose activity is clipped."""
    entries: dict[str, _Entry] = {}
    rows = with_unread(
        MembershipInterval.objects.filter(user=user, conversation__tenant_id=user.tenant_id)
        .select_related("conversation")
        .order_by("joined_at")
    )
    for interval in rows:
        entry = entries.setdefault(interval.conversation_id, _Entry(interval.conversation))
        entry.intervals.append(interval)
        # Intervals of one user never overlap (a join needs a non-member), so counts add up.
        entry.unread += interval.unread
        entry.mention_count += interval.mention_count
    clipped = []
    for entry in entries.values():
        newest = entry.conversation.last_activity_seq
        if newest == 0:
            continue  # no activity at all
        if any(interval.covers(newest) for interval in entry.intervals):
            # The conversation's newest activity, and the reader sees it: theirs too. The
            # columns are written with the row, from the same clock reading (log.py).
            entry.activity_seq, entry.activity_ms = newest, entry.conversation.last_activity_ms
        else:
            # A former member (or one who joined after it) must not see activity outside their
            # intervals: their newest is an older row, found in SQL.
            clipped.append(entry)
    for conversation_id, seq, ms in _newest_in_intervals(user.pk, [e.conversation.pk for e in clipped]):
        entry = entries[conversation_id]
        if seq is not None and seq > entry.activity_seq:
            entry.activity_seq, entry.activity_ms = seq, ms
    return entries


def _newest_in_intervals(user_pk: int, conversation_ids: list[str]) -> Iterator[tuple[str, int | None, int | None]]:
    """(conversation_id, seq, sent_at_ms) of the newest affects_session_order row inside each of
    the reader's intervals of these conversations (None, None for an interval without one)."""
    for batch in _batched(conversation_ids, IN_BATCH):
        newest = MessageRecord.objects.filter(
            conversation_id=OuterRef("conversation_id"),
            affects_session_order=True,
            conversation_seq__gt=OuterRef("joined_at"),
            conversation_seq__lt=OuterRef("end"),
        ).order_by("-conversation_seq")
        yield from (
            MembershipInterval.objects.filter(user_id=user_pk, conversation_id__in=batch)
            .annotate(end=open_end())
            .annotate(
                seq=Subquery(newest.values("conversation_seq")[:1]),
                ms=Subquery(newest.values("sent_at_ms")[:1]),
            )
            .values_list("conversation_id", "seq", "ms")
        )


def _item_chunks(entries: list[_Entry]) -> Iterator[list[dict[str, Any]]]:
    """The items of `entries`, in order, CHUNK at a time: one query reads a chunk's previews."""
    for chunk in _batched(entries, CHUNK):
        records = _activity_records(chunk)
        yield [_item(entry, records.get(entry.conversation.pk)).frame() for entry in chunk]


def _activity_records(entries: Sequence[_Entry]) -> dict[str, MessageRecord]:
    """conversation_id -> the entry's newest visible activity row, for its preview."""
    wanted = [
        Q(conversation_id=entry.conversation.pk, conversation_seq=entry.activity_seq)
        for entry in entries if entry.activity_seq
    ]
    if not wanted:
        return {}
    rows = MessageRecord.objects.filter(reduce(operator.or_, wanted)).select_related("sender")
    return {row.conversation_id: row for row in rows}


def _item(entry: _Entry, latest: MessageRecord | None) -> ListItem:
    conversation = entry.conversation
    return ListItem(
        conversation_id=conversation.pk,
        kind=conversation.kind,
        title=conversation.title,
        last_seq=visible_head(conversation, entry.intervals),
        last_activity_ms=entry.activity_ms,
        preview=message_object(latest, conversation)["preview"] if latest else "",
        unread=entry.unread,
        member=entry.intervals[-1].left_at is None,
        role=entry.intervals[-1].role,
        tier=tier_of(entry.intervals[-1]),
        mention_count=entry.mention_count,
    )


def _batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
