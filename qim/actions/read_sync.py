"""MARK_READ and cross-device read sync (design §2, C-4).

The read cursor is per user and only moves forward. Other devices of the user learn the new
position from one qim.read.v1 event per conversation per read_sync_merge_window, written to
the user's own mailbox, never delivered to the device that marked. Trailing edge: the first
mark that moves the cursor opens the window and persists a PendingReadSync; later marks inside
the window only move its position; when the window closes the flush writes the last position,
once. So 10 marks within 3 s make at most one mailbox entry, and a node that dies inside the
window leaves the pending row for the next flush (a restarted node, or any node's sweep).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from qim.actions.mailbox import EntrySpec, write_mailbox_entries
from qim.clock import now_ms as wall_clock_ms
from qim.conf import limit
from qim.content_types import READ
from qim.infra.faults import fault_point
from qim.infra import codec
from qim.models import (
    Conversation,
    PendingReadSync,
    ReadCursor,
    User,
    UserBadgeState,
    UserMailboxEntry,
)
from qim.notify import UserPush, push_on_commit
from qim.queries.conversations import access_member_intervals, visible_head
from qim.queries.unread import push_badge, unread_count
from qim.render import mailbox_event

FLUSH_BATCH = 500


@dataclass(frozen=True)
class MarkedRead:
    read_conversation_seq: int
    unread: int
    # Set when this mark opened a merge window: the flush is due then (the caller's timer).
    flush_due_at_ms: int | None = None

    def frame(self) -> dict[str, Any]:
        return {"type": "ACK", "read_conversation_seq": self.read_conversation_seq, "unread": self.unread}


def check_mark_read(
    user: User, device_id: str, conversation: Conversation, read_conversation_seq: int, now_ms: int
) -> MarkedRead:
    """Mark `conversation` read up to `read_conversation_seq`, clipped to what the user can see.

    Joins the caller's transaction (the frame handler opens it). `forbidden` for someone who
    was never a member. Marking at or below the cursor changes nothing and answers the cursor.
    """
    intervals = access_member_intervals(conversation, user.pk)
    position = min(read_conversation_seq, visible_head(conversation, intervals))
    return do_mark_read(user, device_id, conversation, position, now_ms)


def do_mark_read(
    user: User,
    device_id: str,
    conversation: Conversation,
    position: int,
    now_ms: int,
) -> MarkedRead:
    """Move the cursor to max(cursor, position); when it moved, merge the position into the
    pending read sync and recompute the badge. Takes the cursor's row lock (serialising marks
    of one user in one conversation) in the caller's transaction. Emits nothing: the event
    leaves when the window closes (flush_due_read_syncs)."""
    ReadCursor.objects.get_or_create(user=user, conversation=conversation)
    cursor = ReadCursor.objects.select_for_update().get(user=user, conversation=conversation)
    due = None
    if position > cursor.read_conversation_seq:
        cursor.read_conversation_seq = position
        cursor.save(update_fields=["read_conversation_seq"])
        due = _merge_pending(user, device_id, conversation, position, now_ms)
        store_badge(user.pk, now_ms)
    unread = unread_count(conversation.pk, user.pk)
    return MarkedRead(cursor.read_conversation_seq, unread, due)


def _merge_pending(user: User, device_id: str, conversation: Conversation, position: int, now_ms: int) -> int | None:
    """Answers the due time when this mark opened a new window, else None (merged)."""
    pending = PendingReadSync.objects.select_for_update().filter(user=user, conversation=conversation).first()
    if pending is not None:
        # The last position wins; its device is the one that must not be told.
        pending.read_conversation_seq, pending.origin_device_id = position, device_id
        pending.save(update_fields=["read_conversation_seq", "origin_device_id"])
        return None
    due = now_ms + int(limit("read_sync_merge_window_s") * 1000)
    PendingReadSync.objects.create(
        tenant_id=user.tenant_id, user=user, conversation=conversation,
        read_conversation_seq=position, origin_device_id=device_id, due_at_ms=due,
    )
    return due


def store_badge(user_pk: int, now_ms: int) -> None:
    """Reading (or a tier switch) changes the badge pushes carry: recompute it from
    definitional unread (qim.queries.unread.push_badge). The badge row is locked first, so a
    message committing meanwhile (bump_badges) adds on top, never under."""
    UserBadgeState.objects.get_or_create(user_id=user_pk)
    badge = UserBadgeState.objects.select_for_update().get(user_id=user_pk)
    badge.badge, badge.updated_at_ms = push_badge(user_pk), now_ms
    badge.save(update_fields=["badge", "updated_at_ms"])


def flush_due_read_syncs(now_ms: int | None = None, *, everything: bool = False) -> int:
    """Write the qim.read.v1 event of every PendingReadSync whose window has closed (all of
    them with `everything`), each in its own transaction; answers how many were written. Safe
    on several nodes at once: each row is written by whoever locks it first."""
    flushed = 0
    while True:
        now = now_ms if now_ms is not None else wall_clock_ms()
        due = PendingReadSync.objects.order_by("due_at_ms")
        if not everything:
            due = due.filter(due_at_ms__lte=now)
        batch = list(due.values_list("pk", flat=True)[:FLUSH_BATCH])
        for pending_pk in batch:
            # Right before the flush writes: dying here leaves the row (and the final
            # position) for the next flush, on this node after a restart or on another.
            fault_point("read_sync.before_flush")
            with transaction.atomic():
                flushed += do_flush_read_sync(pending_pk, now, everything=everything)
        if len(batch) < FLUSH_BATCH:
            return flushed


def do_flush_read_sync(pending_pk: int, now_ms: int, *, everything: bool = False) -> int:
    """One due pending read sync -> one control entry in the user's own mailbox (origin device
    set), the pending row deleted; EVENT after commit to the user's other devices. Joins the
    caller's transaction; answers 1, or 0 when someone else flushed it first."""
    rows = PendingReadSync.objects.select_for_update(of=("self",)).select_related("user", "conversation")
    if not everything:
        rows = rows.filter(due_at_ms__lte=now_ms)
    pending = rows.filter(pk=pending_pk).first()
    if pending is None:
        return 0
    user = pending.user
    control = {
        "custom_type": READ,
        "read_conversation_seq": pending.read_conversation_seq,
        "actor_id": user.username,
        "origin_device_id": pending.origin_device_id,
    }
    spec = EntrySpec(kind=UserMailboxEntry.CONTROL, control=control, origin_device_id=pending.origin_device_id)
    [seqs] = write_mailbox_entries(
        tenant_id=pending.tenant_id, conversation_id=pending.conversation_id, specs=[spec],
        recipients=[user.pk], now_ms=now_ms,
    )
    entry = UserMailboxEntry(
        user=user, mailbox_seq=seqs[user.pk], kind=UserMailboxEntry.CONTROL,
        conversation_id=pending.conversation_id, control=control, origin_device_id=pending.origin_device_id,
    )
    push_on_commit(
        UserPush(
            tenant_id=pending.tenant_id,
            user_ids=[user.username],
            text=codec.encode({"type": "EVENT", "event": mailbox_event(entry, pending.conversation)}),
            exclude_device=(user.username, pending.origin_device_id),
        )
    )
    pending.delete()
    return 1
