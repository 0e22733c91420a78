"""qim.queries.conversation_list in process: the set-based list answers item for item what the
per-conversation reads answered (kept here as the oracle), through leaves, rejoins, joins after
activity, recalls, edits and reads, and pages over it by cursor and limit."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from qim.actions.accounts import do_create_user
from qim.actions.conversations import do_add_members, do_create_conversation, do_remove_member
from qim.actions.edit import check_edit_message
from qim.actions.read_sync import check_mark_read
from qim.actions.recall import check_recall_message
from qim.clock import now_ms
from qim.errors import Refused
from qim.models import Conversation, MembershipInterval, MessageRecord, ReadCursor, User
from qim.queries.conversation_list import ListCursor, conversation_page
from qim.queries.conversations import visible_head, visible_seqs
from qim.render import message_object
from tests.control.personas_in_process import Cast, make_cast, send_text

pytestmark = pytest.mark.django_db

HUGE = 1 << 40


def oracle_unread(conversation: Conversation, user_pk: int, intervals: list[MembershipInterval]) -> int:
    """Definitional unread read the plain way (design, Substrate): counted types after the read
    cursor, inside the intervals, not the reader's own, not recalled or deleted."""
    cursor = ReadCursor.objects.filter(conversation=conversation, user_id=user_pk).first()
    return (
        MessageRecord.objects.filter(
            visible_seqs(intervals),
            conversation=conversation,
            counts_unread=True,
            conversation_seq__gt=cursor.read_conversation_seq if cursor else 0,
            state__in=[MessageRecord.NORMAL, MessageRecord.EDITED],
        )
        .exclude(sender_id=user_pk)
        .count()
    )


def oracle_list(user: User) -> tuple[list[dict[str, Any]], int]:
    """The list as conversation_list computed it before paging: 3-4 queries a conversation."""
    intervals_by_conversation: dict[str, list[MembershipInterval]] = {}
    for interval in MembershipInterval.objects.filter(user=user).order_by("joined_at"):
        intervals_by_conversation.setdefault(interval.conversation_id, []).append(interval)
    items = []
    for conversation in Conversation.objects.filter(pk__in=list(intervals_by_conversation), tenant_id=user.tenant_id):
        intervals = intervals_by_conversation[conversation.pk]
        latest = (
            MessageRecord.objects.filter(visible_seqs(intervals), conversation=conversation, affects_session_order=True)
            .select_related("sender").order_by("-conversation_seq").first()
        )
        items.append({
            "conversation_id": conversation.pk, "kind": conversation.kind, "title": conversation.title,
            "last_seq": visible_head(conversation, intervals),
            "last_activity_ms": latest.sent_at_ms if latest else 0,
            "preview": message_object(latest, conversation)["preview"] if latest else "",
            "unread": oracle_unread(conversation, user.pk, intervals),
            "member": intervals[-1].left_at is None,
            "role": intervals[-1].role, "tier": "full", "mention_count": 0,
        })
    items.sort(key=lambda item: (item["last_activity_ms"], item["conversation_id"]), reverse=True)
    return items, sum(item["unread"] for item in items)


def whole(user: User) -> tuple[list[dict[str, Any]], int]:
    page = conversation_page(user, max_bytes=HUGE)
    assert page.has_more is False and page.next_before() is None
    assert json.loads(bytes(page.items_json)) == page.items
    return page.items, page.badge


def group(owner: User, *members: User, title: str) -> Conversation:
    conversation, _ = do_create_conversation(
        owner, kind="group", title=title, member_user_ids=[m.username for m in members], e2ee=False
    )
    return conversation


def mark(user: User, conversation: Conversation, seq: int) -> None:
    with transaction.atomic():
        check_mark_read(user, "phone", Conversation.objects.get(pk=conversation.pk), seq, now_ms())


def busy_cast() -> tuple[Cast, User]:
    """alice, bob and carol in conversations of every shape the clipping has to get right."""
    cast = make_cast()
    alice, bob = cast.alice, cast.bob
    carol = do_create_user(cast.tenant, "carol", "pw")
    send_text(alice, cast.group, "hello")  # both members, activity inside the open intervals

    left = group(alice, bob, carol, title="left")  # bob leaves; activity goes on without him
    send_text(alice, left, "before")
    send_text(carol, left, "before too")
    do_remove_member(left.pk, bob, "phone", "bob")
    send_text(alice, left, "after")

    rejoined = group(alice, bob, title="rejoined")  # bob out and back in, nothing new since
    send_text(alice, rejoined, "first")
    do_remove_member(rejoined.pk, bob, "phone", "bob")
    send_text(alice, rejoined, "while out")
    do_add_members(rejoined.pk, alice, "phone", ["bob"])

    late = group(alice, title="late")  # bob joins after all its activity: none visible
    send_text(alice, late, "old news")
    do_add_members(late.pk, alice, "phone", ["bob"])

    group(alice, bob, title="silent")  # no activity at all

    anchored = group(alice, bob, carol, title="anchored")  # recall and edit events move nothing
    recalled = send_text(bob, anchored, "mine")
    kept = send_text(alice, anchored, "theirs")
    check_recall_message(bob, "phone", anchored.pk, recalled)
    check_edit_message(alice, "phone", anchored.pk, kept, {"text": "theirs, edited"})

    read = group(carol, bob, title="read")  # a read cursor in the middle
    for n in range(4):
        send_text(carol, read, f"r{n}")
    mark(bob, read, 2)

    removed = group(alice, bob, title="removed")  # bob removed by the admin, never back
    send_text(bob, removed, "last words")
    do_remove_member(removed.pk, cast.admin, "console", "bob")
    send_text(alice, removed, "gone")
    return cast, carol


def test_the_list_is_item_for_item_what_the_per_conversation_reads_answered() -> None:
    cast, carol = busy_cast()
    for user in (cast.alice, cast.bob, carol, cast.admin):
        assert whole(user) == oracle_list(user), user.username
    items, badge = whole(cast.bob)
    by_title = {item["title"]: item for item in items}
    assert by_title["left"]["preview"] == "before too" and by_title["left"]["member"] is False
    assert by_title["late"]["last_activity_ms"] == 0 and by_title["late"]["preview"] == ""
    assert by_title["rejoined"]["preview"] == "first" and by_title["rejoined"]["unread"] == 1
    assert by_title["anchored"]["preview"] == "theirs, edited"
    assert by_title["read"]["unread"] == 2 and badge > 0


def test_pages_by_cursor_and_limit_cover_the_list_once_in_order_with_the_whole_badge() -> None:
    cast, carol = busy_cast()
    expected, badge = oracle_list(cast.bob)
    for limit in (1, 2, 3):
        pages = [conversation_page(cast.bob, limit=limit, max_bytes=HUGE)]
        while pages[-1].has_more:
            pages.append(conversation_page(cast.bob, before=pages[-1].next_before(), limit=limit, max_bytes=HUGE))
            assert len(pages) <= len(expected)
        assert [item for page in pages for item in page.items] == expected
        assert all(len(page.items) == limit for page in pages[:-1])
        assert {page.badge for page in pages} == {badge}
    # Cut by size: one item a page when the budget holds less than two.
    one = conversation_page(cast.bob, max_bytes=10)
    assert (one.items, one.has_more) == (expected[:1], True)


def test_a_cursor_outside_the_readers_list_is_refused_as_bad_frame() -> None:
    cast, carol = busy_cast()
    only_carol = group(carol, title="carol's")
    for conversation_id in (only_carol.pk, "01NOSUCHCONVERSATION000000"):
        with pytest.raises(Refused) as refused:
            conversation_page(cast.bob, before=ListCursor(HUGE, conversation_id), max_bytes=HUGE)
        assert refused.value.code == "bad_frame"


def test_the_list_takes_the_same_few_queries_for_three_conversations_or_thirty() -> None:
    cast, carol = busy_cast()  # bob is in 8, three clipped (a leave, a rejoin, a removal)
    conversation_page(cast.bob, max_bytes=HUGE)  # the registry's cache is warm
    with CaptureQueriesContext(connection) as few:
        conversation_page(cast.bob, max_bytes=HUGE)
    for n in range(30):
        send_text(cast.alice, group(cast.alice, cast.bob, title=f"more {n}"), f"m{n}")
    with CaptureQueriesContext(connection) as many:
        assert len(conversation_page(cast.bob, max_bytes=HUGE).items) == 38
    # Intervals with unread; the clipped activity; one preview read per CHUNK items.
    assert len(few) == len(many) == 3, [q["sql"] for q in many.captured_queries]
