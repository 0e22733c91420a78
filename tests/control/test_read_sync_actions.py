"""qim.actions.read_sync in process, on an injected clock: the trailing-edge merge window, the
last position winning, flush idempotence."""

from __future__ import annotations

import pytest
from django.db import transaction

from qim.actions.read_sync import check_mark_read, flush_due_read_syncs
from qim.errors import Refused
from qim.models import Conversation, PendingReadSync, ReadCursor, UserBadgeState, UserMailboxEntry
from tests.control.personas_in_process import make_cast, send_text

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000_000
WINDOW_MS = 3000  # the default read_sync_merge_window_s


def mark(user, device_id: str, conversation: Conversation, seq: int, at_ms: int):  # type: ignore[no-untyped-def]
    with transaction.atomic():
        fresh = Conversation.objects.get(pk=conversation.pk)
        return check_mark_read(user, device_id, fresh, seq, at_ms)


def read_events(user) -> list[UserMailboxEntry]:  # type: ignore[no-untyped-def]
    return list(UserMailboxEntry.objects.filter(user=user, kind="control", message__isnull=True).order_by("mailbox_seq"))


def test_marks_inside_one_window_write_one_event_when_it_closes_with_the_last_position() -> None:
    cast = make_cast()
    for i in range(10):
        send_text(cast.bob, cast.group, f"m{i}")
    first = mark(cast.alice, "phone", cast.group, 1, T0)
    assert first.flush_due_at_ms == T0 + WINDOW_MS  # the first mark opens the window
    for seq in range(2, 9):
        assert mark(cast.alice, "phone", cast.group, seq, T0 + seq * 200).flush_due_at_ms is None
    last = mark(cast.alice, "tablet", cast.group, 10, T0 + 2900)  # another device has the last word
    assert (last.read_conversation_seq, last.unread) == (10, 0)

    assert flush_due_read_syncs(T0 + WINDOW_MS - 1) == 0 and read_events(cast.alice) == []
    assert flush_due_read_syncs(T0 + WINDOW_MS) == 1
    assert flush_due_read_syncs(T0 + WINDOW_MS + 10) == 0  # flushed once
    [event] = read_events(cast.alice)
    assert event.control == {
        "custom_type": "qim.read.v1", "read_conversation_seq": 10, "actor_id": "alice", "origin_device_id": "tablet",
    }
    assert event.origin_device_id == "tablet" and event.conversation_id == cast.group.pk
    assert PendingReadSync.objects.count() == 0
    assert read_events(cast.bob) == []


def test_a_mark_that_does_not_move_the_cursor_writes_nothing() -> None:
    cast = make_cast()
    for i in range(5):
        send_text(cast.bob, cast.group, f"m{i}")
    mark(cast.alice, "phone", cast.group, 4, T0)
    flush_due_read_syncs(T0 + WINDOW_MS)
    events = len(read_events(cast.alice))
    back = mark(cast.alice, "phone", cast.group, 2, T0 + 10_000)
    assert (back.read_conversation_seq, back.unread, back.flush_due_at_ms) == (4, 1, None)
    assert PendingReadSync.objects.count() == 0 and len(read_events(cast.alice)) == events
    assert ReadCursor.objects.get(user=cast.alice).read_conversation_seq == 4


def test_a_later_window_opens_after_the_flush_and_the_badge_follows_reading() -> None:
    cast = make_cast()
    for i in range(4):
        send_text(cast.bob, cast.group, f"m{i}")
    assert UserBadgeState.objects.get(user=cast.alice).badge == 4
    mark(cast.alice, "phone", cast.group, 1, T0)
    assert UserBadgeState.objects.get(user=cast.alice).badge == 3
    flush_due_read_syncs(T0 + WINDOW_MS)
    again = mark(cast.alice, "phone", cast.group, 4, T0 + WINDOW_MS + 1)
    assert again.flush_due_at_ms == T0 + 2 * WINDOW_MS + 1
    assert UserBadgeState.objects.get(user=cast.alice).badge == 0
    assert flush_due_read_syncs(T0 + 2 * WINDOW_MS + 1) == 1
    assert [e.control["read_conversation_seq"] for e in read_events(cast.alice)] == [1, 4]


def test_everything_flushes_open_windows_too_and_strangers_are_refused() -> None:
    cast = make_cast()
    send_text(cast.bob, cast.group, "m")
    mark(cast.alice, "phone", cast.group, 1, T0)
    assert flush_due_read_syncs(T0, everything=True) == 1
    with pytest.raises(Refused) as refused:
        mark(cast.admin, "phone", cast.group, 1, T0)
    assert refused.value.code == "forbidden"
