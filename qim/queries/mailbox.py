"""A device's catch-up through its user's mailbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qim.models import UserMailboxEntry
from qim.render import mailbox_event

SYNC_DEFAULT_LIMIT = 200
SYNC_MAX_LIMIT = 1000


@dataclass(frozen=True)
class SyncPage:
    events: list[dict[str, Any]]
    next_mailbox_seq: int
    has_more: bool


def sync_page(user_pk: int, device_id: str, after_mailbox_seq: int, limit: int | None) -> SyncPage:
    """Entries after the cursor, ascending. Entries that originated on this device are skipped
    but still advance the cursor, so a page can hold fewer events than `limit`."""
    limit = min(max(1, limit or SYNC_DEFAULT_LIMIT), SYNC_MAX_LIMIT)
    rows = list(
        UserMailboxEntry.objects.filter(user_id=user_pk, mailbox_seq__gt=after_mailbox_seq)
        .select_related("conversation", "message__sender")
        .order_by("mailbox_seq")[: limit + 1]
    )
    has_more = len(rows) > limit
    rows = rows[:limit]
    events = [
        mailbox_event(entry, entry.conversation)
        for entry in rows
        if entry.origin_device_id != device_id
    ]
    next_seq = rows[-1].mailbox_seq if rows else after_mailbox_seq
    return SyncPage(events=events, next_mailbox_seq=next_seq, has_more=has_more)
