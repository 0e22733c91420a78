"""A device's catch-up through its user's mailbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from qim.node.fit import fit_list
from qim.queries.mailbox_rows import EntryRow, entry_rows
from qim.queries.retention import mailbox_heads, mailbox_truncated
from qim.render import mailbox_event

SYNC_DEFAULT_LIMIT = 200
SYNC_MAX_LIMIT = 1000


@dataclass(frozen=True)
class SyncPage:
    events: list[dict[str, Any]]
    # The JSON list of `events`, encoded once while measuring it (qim/node/fit.py).
    events_json: msgspec.Raw
    next_mailbox_seq: int
    has_more: bool
    # Retention deleted entries after the cursor (qim/queries/retention.py): SYNC_BATCH says so.
    history_truncated: bool = False


@dataclass(frozen=True)
class SyncRequest:
    """One SYNC: the device, its cursor, the page size asked for and the reply's byte budget."""

    user_pk: int
    device_id: str
    after_mailbox_seq: int
    limit: int | None
    max_bytes: int


def sync_page(
    user_pk: int, device_id: str, after_mailbox_seq: int, limit: int | None, *, max_bytes: int
) -> SyncPage:
    """Entries after the cursor, ascending. Entries that originated on this device are skipped
    but still advance the cursor, so a page can hold fewer events than `limit`.

    The events' JSON takes at most `max_bytes` (one event at least, whatever its size): a page
    cut by size ends at the last event it carries, so the cursor never passes an event not
    sent (nor the skipped entries after it), and says `has_more`.
    """
    return sync_pages([SyncRequest(user_pk, device_id, after_mailbox_seq, limit, max_bytes)])[0]


def sync_pages(requests: list[SyncRequest]) -> list[SyncPage]:
    """sync_page for each request, in order, reading the entries of all of them with one query
    per distinct user among them (a reconnect storm's SYNCs, docs/performance.md,
    "Lean handshake, upgrade, frame and per-socket paths"): a user
    asked for twice (two devices) gets a query for each of its requests, as alone."""
    pages: list[SyncPage | None] = [None] * len(requests)
    pending = list(enumerate(requests))
    while pending:
        users: set[int] = set()
        now, later = [], []
        for index, request in pending:
            (later if request.user_pk in users else now).append((index, request))
            users.add(request.user_pk)
        rows = _entries_after([request for _, request in now])
        # Read after the pages, as mailbox_truncated would read each (qim/queries/retention.py).
        heads = mailbox_heads([request.user_pk for _, request in now if request.user_pk not in rows])
        for index, request in now:
            pages[index] = _page(request, rows.get(request.user_pk, []), heads.get(request.user_pk))
        pending = later
    return pages  # type: ignore[return-value]


def _page_size(request: SyncRequest) -> int:
    return min(max(1, request.limit or SYNC_DEFAULT_LIMIT), SYNC_MAX_LIMIT)


def _entries_after(requests: list[SyncRequest]) -> dict[int, list[EntryRow]]:
    """Up to page size + 1 entries after each request's cursor, ascending, by user (one
    request per user here), read as plain rows in one statement (qim/queries/mailbox_rows.py)."""
    size = {request.user_pk: _page_size(request) + 1 for request in requests}
    by_user: dict[int, list[EntryRow]] = {}
    for entry in entry_rows([(r.user_pk, r.after_mailbox_seq) for r in requests], max(size.values())):
        rows = by_user.setdefault(entry.user_id, [])
        if len(rows) < size[entry.user_id]:
            rows.append(entry)
    return by_user


def _page(request: SyncRequest, rows: list[EntryRow], head: int | None = None) -> SyncPage:
    """The page of one request from its entries after the cursor (at most page size + 1)."""
    user_pk, device_id, after_mailbox_seq = request.user_pk, request.device_id, request.after_mailbox_seq
    limit = _page_size(request)
    has_more = len(rows) > limit
    rows = rows[:limit]
    events = [
        mailbox_event(entry, entry.conversation)  # type: ignore[arg-type]
        for entry in rows
        if entry.origin_device_id != device_id
    ]
    fitted = fit_list(events, request.max_bytes)
    if len(fitted.items) < len(events):
        next_seq = fitted.items[-1]["mailbox_seq"]
        sent_seqs = [r.mailbox_seq for r in rows if r.mailbox_seq <= next_seq]
        truncated = mailbox_truncated(user_pk, after_mailbox_seq, sent_seqs)
        return SyncPage(fitted.items, fitted.json, next_seq, has_more=True, history_truncated=truncated)
    next_seq = rows[-1].mailbox_seq if rows else after_mailbox_seq
    truncated = mailbox_truncated(user_pk, after_mailbox_seq, [r.mailbox_seq for r in rows], head)
    return SyncPage(events, fitted.json, next_seq, has_more, history_truncated=truncated)
