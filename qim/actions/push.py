"""The PushTask outbox's writes: claim a batch under a lease, then settle each claim.

Each function is one transaction. A claim is fenced by (claimed_by, claimed_until_ms): every
settling write is a conditional UPDATE that matches only while this exact claim still holds,
so a worker whose lease ran out and was taken over cannot mark, fail or release the task of
the worker that took it. Rows are never deleted here.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Min, Q
from django.db.models.functions import Greatest

from qim.models import PushTask

# Backoff stops doubling here: a device offline for a day still gets its push within the hour.
MAX_RETRY_DELAY_MS = 3600 * 1000
LAST_ERROR_MAX_CHARS = 2000


def lease_ms() -> int:
    return int(settings.QIM_PUSH_LEASE_S * 1000)


def retention_ms() -> int:
    return int(settings.QIM_PUSH_TASK_RETENTION_S * 1000)


def retry_delay_ms(attempts: int) -> int:
    """QIM_PUSH_RETRY_BASE_S * 2**(attempts-1), in ms, capped at MAX_RETRY_DELAY_MS."""
    base_ms = settings.QIM_PUSH_RETRY_BASE_S * 1000
    exponent = min(max(attempts - 1, 0), 40)  # past 2**40 the cap has long applied
    return int(min(base_ms * 2**exponent, MAX_RETRY_DELAY_MS))


def claim_tasks(worker_id: str, limit: int, now_ms: int) -> list[PushTask]:
    """Lease up to `limit` due, unclaimed pending tasks to `worker_id`, oldest id first.

    One transaction of its own (not to be called inside another: the lease must be visible
    to other workers as soon as this returns). On PostgreSQL the candidate rows are locked
    with SKIP LOCKED, so concurrent claimers pass over each other's rows; a row whose claim
    commits while we wait for it is re-checked against `claimed_until_ms < now` and dropped.
    SQLite has no row locks: there the transaction is BEGIN IMMEDIATE (settings), so claimers
    serialize on the database's write lock and each one reads the claims of the ones before.
    Answers the claimed tasks with tenant, user and device loaded.
    """
    due = PushTask.objects.filter(
        state=PushTask.PENDING, available_at_ms__lte=now_ms, claimed_until_ms__lt=now_ms
    ).order_by("id")
    with transaction.atomic():
        if connection.features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        ids = list(due.values_list("id", flat=True)[:limit])
        if not ids:
            return []
        PushTask.objects.filter(id__in=ids).update(
            claimed_by=worker_id, claimed_until_ms=now_ms + lease_ms()
        )
        return list(
            PushTask.objects.select_related("tenant", "user", "device").filter(id__in=ids).order_by("id")
        )


def _claim_held(task: PushTask) -> Q:
    """The fence: this row, still pending, still under the claim `task` was handed with."""
    return Q(
        id=task.id,
        state=PushTask.PENDING,
        claimed_by=task.claimed_by,
        claimed_until_ms=task.claimed_until_ms,
    )


def mark_sent(task: PushTask, now_ms: int) -> bool:
    """Record a delivered push and clear the claim; False if the claim was lost meanwhile.

    last_error stays: a task sent on its third try still says why the first two failed."""
    attempts = task.attempts + 1
    updated = PushTask.objects.filter(_claim_held(task)).update(
        state=PushTask.SENT,
        sent_at_ms=now_ms,
        attempts=attempts,
        claimed_by="",
        claimed_until_ms=0,
    )
    if updated:
        task.state, task.sent_at_ms, task.attempts = PushTask.SENT, now_ms, attempts
        task.claimed_by, task.claimed_until_ms = "", 0
    return bool(updated)


def record_failure(
    task: PushTask, error: str, *, permanent: bool, now_ms: int, not_before_ms: int | None = None
) -> str | None:
    """Count a failed try and release the claim: the task goes back to pending with backoff
    (and not before `not_before_ms`, a provider's Retry-After), or to failed when the error is
    permanent or attempts reach QIM_PUSH_MAX_ATTEMPTS.

    Answers the new state, or None if the claim was lost meanwhile (nothing written).
    """
    attempts = task.attempts + 1
    give_up = permanent or attempts >= settings.QIM_PUSH_MAX_ATTEMPTS
    state = PushTask.FAILED if give_up else PushTask.PENDING
    available_at_ms = task.available_at_ms if give_up else now_ms + retry_delay_ms(attempts)
    if not give_up and not_before_ms is not None:
        available_at_ms = max(available_at_ms, not_before_ms)
    error = error[:LAST_ERROR_MAX_CHARS]
    updated = PushTask.objects.filter(_claim_held(task)).update(
        state=state,
        attempts=attempts,
        last_error=error,
        available_at_ms=available_at_ms,
        claimed_by="",
        claimed_until_ms=0,
    )
    if not updated:
        return None
    task.state, task.attempts, task.last_error = state, attempts, error
    task.available_at_ms, task.claimed_by, task.claimed_until_ms = available_at_ms, "", 0
    return state


def release_claims(tasks: list[PushTask]) -> int:
    """Give back claims that were never tried (stopping, or too little lease left to send),
    so any worker can take them at once instead of after the lease; attempts unchanged."""
    by_claim: dict[tuple[str, int], list[int]] = {}
    for task in tasks:
        by_claim.setdefault((task.claimed_by, task.claimed_until_ms), []).append(task.id)
    released = 0
    for (claimed_by, claimed_until_ms), ids in by_claim.items():
        released += PushTask.objects.filter(
            id__in=ids,
            state=PushTask.PENDING,
            claimed_by=claimed_by,
            claimed_until_ms=claimed_until_ms,
        ).update(claimed_by="", claimed_until_ms=0)
    return released


def next_claimable_ms(now_ms: int, horizon_ms: int) -> int | None:
    """The earliest moment within [.., now + horizon] at which some pending task can be
    claimed (due, and any claim on it expired), or None if no task becomes claimable by then."""
    until = now_ms + horizon_ms
    soonest = (
        PushTask.objects.filter(
            state=PushTask.PENDING, available_at_ms__lte=until, claimed_until_ms__lt=until
        )
        .aggregate(at=Min(Greatest("available_at_ms", F("claimed_until_ms") + 1)))
        .get("at")
    )
    return None if soonest is None else int(soonest)


def prune_finished(now_ms: int, limit: int = 1000) -> int:
    """Delete up to `limit` sent or failed tasks last due more than QIM_PUSH_TASK_RETENTION_S
    ago (never a pending one); answers how many. A retention of 0 keeps every task."""
    retention = retention_ms()
    if retention <= 0:
        return 0
    ids = list(
        PushTask.objects.filter(state__in=[PushTask.SENT, PushTask.FAILED], available_at_ms__lt=now_ms - retention)
        .order_by()
        .values_list("id", flat=True)[:limit]
    )
    if not ids:
        return 0
    return PushTask.objects.filter(id__in=ids).delete()[0]


def do_retry_tasks(ids: list[int], now_ms: int) -> dict[str, int]:
    """The admin's "retry": make the chosen tasks due now. One transaction.

    failed -> pending with a fresh QIM_PUSH_MAX_ATTEMPTS budget (attempts 0); last_error stays
    so the operator still sees why it failed. pending and unclaimed -> due now, skipping the
    rest of its backoff, attempts unchanged. A pending task a worker holds (its claim not yet
    expired) and a sent one are left alone: a retry would send the same push twice.
    Answers {"requeued": n, "hurried": n, "skipped": n}.
    """
    with transaction.atomic():
        requeued = PushTask.objects.filter(id__in=ids, state=PushTask.FAILED).update(
            state=PushTask.PENDING, attempts=0, available_at_ms=now_ms, claimed_by="", claimed_until_ms=0
        )
        hurried = PushTask.objects.filter(
            id__in=ids, state=PushTask.PENDING, claimed_until_ms__lt=now_ms, available_at_ms__gt=now_ms
        ).update(available_at_ms=now_ms)
    return {"requeued": requeued, "hurried": hurried, "skipped": len(set(ids)) - requeued - hurried}
