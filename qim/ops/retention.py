"""Message retention: delete what a tenant keeps past its `message_retention_s`, in batches.

Each batch is its own short transaction over at most QIM_RETENTION_BATCH rows found by an
index, so a SEND never waits on more than one batch's row locks. What goes, per tenant:

* each user's mailbox entries created before the cut-off, below their first newer entry
  (mailbox_seq is otherwise gap-free, so SYNC reports the hole they leave as
  `history_truncated`, qim/queries/retention.py);
* each conversation's log below its first row sent at or after the cut-off (a prefix of the
  log, so HISTORY's `history_truncated` is "the oldest kept seq is above where you asked"),
  with what cascades from those rows (mailbox entries still pointing at them, call records)
  and then, through the `conversation_purged` hook, the reactions app's rows on them; the
  stored badges of the readers who had those rows unread go down in the same transaction.

The cut-off is fixed when the run starts: a message sent during the run is newer, never gone.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from qim.actions.badges import do_uncount_rows
from qim.clock import now_ms
from qim.hooks import conversation_purged
from qim.models import Conversation, MessageRecord, Tenant, User, UserMailboxEntry

# Users and conversations are walked by primary key in pages of this many ids.
ID_PAGE = 2000


@dataclass
class RetentionReport:
    """What one tenant's run deleted (or, dry, would delete), by model label."""

    tenant: str
    retention_s: int
    cutoff_ms: int | None
    dry_run: bool
    deleted: Counter[str] = field(default_factory=Counter)
    conversations: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant, "retention_s": self.retention_s, "cutoff_ms": self.cutoff_ms,
            "dry_run": self.dry_run, "conversations_truncated": self.conversations, "seconds": round(self.seconds, 3),
            "deleted": dict(sorted(self.deleted.items())),
        }


def cutoff_ms(tenant: Tenant, now: int) -> int | None:
    """The instant before which the tenant's messages go; None when it keeps them forever."""
    if tenant.message_retention_s <= 0:
        return None
    return now - tenant.message_retention_s * 1000


def apply_retention(tenant: Tenant, *, batch: int | None = None, dry_run: bool = False,
                    now: int | None = None) -> RetentionReport:
    """Delete (or count, `dry_run`) what `tenant` keeps past its retention. Opens its own
    transactions, one per batch: call it outside any."""
    batch = max(1, batch or settings.QIM_RETENTION_BATCH)
    cutoff = cutoff_ms(tenant, now_ms() if now is None else now)
    report = RetentionReport(tenant.name, tenant.message_retention_s, cutoff, dry_run)
    if cutoff is not None:
        started = time.monotonic()
        _purge(tenant, cutoff, batch, report)
        report.seconds = time.monotonic() - started
    return report


def _purge(tenant: Tenant, cutoff: int, batch: int, report: RetentionReport) -> None:
    """Mailboxes first, then each conversation's log, then (hook) what hangs on the log."""
    dry_run = report.dry_run
    for user_pk in _ids(User.objects.filter(tenant=tenant)):
        entries = UserMailboxEntry.objects.filter(user_id=user_pk, created_at_ms__lt=cutoff)
        kept = first_kept_mailbox_seq(user_pk, cutoff)
        if kept is not None:
            entries = entries.filter(mailbox_seq__lt=kept)
        report.deleted["qim.UserMailboxEntry"] += _delete_in_batches(entries, "mailbox_seq", batch, dry_run)
    for conversation_id in _ids(Conversation.objects.filter(tenant=tenant)):
        below = first_kept_seq(conversation_id, cutoff)
        log = MessageRecord.objects.filter(conversation_id=conversation_id, conversation_seq__lt=below)
        if not log.exists():
            continue
        report.conversations += 1
        report.deleted.update(_delete_log(conversation_id, log, batch, dry_run))
        for listener in conversation_purged:
            report.deleted.update(listener(conversation_id, below, batch, dry_run))


def first_kept_mailbox_seq(user_pk: int, cutoff: int) -> int | None:
    """The user's first entry created at or after the cut-off (None: every entry is older).
    Retention deletes below it only, so its reads walk the old entries, never a long mailbox
    of new ones; an entry a few ms older behind it (nodes' clocks) waits for the next run."""
    return (
        UserMailboxEntry.objects.filter(user_id=user_pk, created_at_ms__gte=cutoff)
        .order_by("mailbox_seq").values_list("mailbox_seq", flat=True).first()
    )


def first_kept_seq(conversation_id: str, cutoff: int) -> int:
    """The lowest seq retention keeps: the first row sent at or after the cut-off, or, when
    every row is older, the head + 1 as it is now (rows written later are newer still)."""
    kept = (
        MessageRecord.objects.filter(conversation_id=conversation_id, sent_at_ms__gte=cutoff)
        .order_by("conversation_seq").values_list("conversation_seq", flat=True).first()
    )
    if kept is not None:
        return kept
    head = Conversation.objects.filter(pk=conversation_id).values_list("last_seq", flat=True).first()
    return (head or 0) + 1


def _ids(rows: QuerySet[Any]) -> Iterator[Any]:
    """Primary keys in pages, so no tenant's ids are all in memory at once."""
    after = None
    while True:
        page = rows.order_by("pk")
        if after is not None:
            page = page.filter(pk__gt=after)
        ids = list(page.values_list("pk", flat=True)[:ID_PAGE])
        yield from ids
        if len(ids) < ID_PAGE:
            return
        after = ids[-1]


def _delete_in_batches(rows: QuerySet[Any], order: str, batch: int, dry_run: bool) -> int:
    """Delete `rows` (no dependents: one DELETE a batch) oldest first; answers the count."""
    if dry_run:
        return rows.count()
    total = 0
    while True:
        with transaction.atomic():
            pks = list(rows.order_by(order).values_list("pk", flat=True)[:batch])
            if pks:
                total += rows.model.objects.filter(pk__in=pks).delete()[0]
        if len(pks) < batch:
            return total


def _delete_log(conversation_id: str, log: QuerySet[MessageRecord], batch: int, dry_run: bool) -> Counter[str]:
    """Delete log rows a batch per transaction, with what Django cascades from them (mailbox
    entries still pointing at them, call records), lowering the badges of their readers in
    the same transaction (qim/actions/badges.py); answers the counts by model label."""
    if dry_run:
        return Counter({"qim.MessageRecord": log.count()})
    deleted: Counter[str] = Counter()
    while True:
        with transaction.atomic():
            # Locked first: a recall of one of them waits, or has already lowered the badges.
            rows = list(log.select_for_update().order_by("conversation_seq").values_list("pk", "conversation_seq")[:batch])
            if rows:
                do_uncount_rows(conversation_id, rows[0][1], rows[-1][1], now_ms())
                deleted.update(MessageRecord.objects.filter(pk__in=[pk for pk, _ in rows]).delete()[1])
        if len(rows) < batch:
            return +deleted
