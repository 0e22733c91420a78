"""A device's catch-up through its user's mailbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from qim.gateway.fit import fit_list
from qim.models import UserMailboxEntry
from qim.queries.retention import mailbox_truncated
from qim.render import mailbox_event

SYNC_DEFAULT_LIMIT = 200
SYNC_MAX_LIMIT = 1000


@dataclass(frozen=True)
class SyncPage:
    events: list[dict[str, Any]]
    # The JSON list of `events`, encoded once while measuring it (qim/gateway/fit.py).
    events_json: msgspec.Raw
    next_mailbox_seq: int
    has_more: bool
    # Retention deleted entries after the cursor (qim/queries/retention.py): SYNC_BATCH says so.
    history_truncated: bool = False


def sync_page(
    user_pk: int, device_id: str, after_mailbox_seq: int, limit: int | None, *, max_bytes: int
) -> SyncPage:
    """Entries after the cursor, ascending. Entries that originated on this device are skipped
    but still advance the cursor, so a page can hold fewer events than `limit`.

    The events' JSON takes at most `max_bytes` (one event at least, whatever its size): a page
    cut by size ends at the last event it carries, so the cursor never passes an event not
    sent (nor the skipped entries after it), and says `has_more`.
    """
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
    fitted = fit_list(events, max_bytes)
    if len(fitted.items) < len(events):
        next_seq = fitted.items[-1]["mailbox_seq"]
        sent_seqs = [r.mailbox_seq for r in rows if r.mailbox_seq <= next_seq]
        truncated = mailbox_truncated(user_pk, after_mailbox_seq, sent_seqs)
        return SyncPage(fitted.items, fitted.json, next_seq, has_more=True, history_truncated=truncated)
    next_seq = rows[-1].mailbox_seq if rows else after_mailbox_seq
    truncated = mailbox_truncated(user_pk, after_mailbox_seq, [r.mailbox_seq for r in rows])
    return SyncPage(events, fitted.json, next_seq, has_more, history_truncated=truncated)
