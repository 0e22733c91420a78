"""The push worker loop: claim a batch, send each task outside any transaction, settle it.

Delivery is at least once: a worker that dies mid-send leaves its claim to expire, and the
task is sent again by whoever claims it next. Two live workers never hold one task: claims
are exclusive (outbox.claim_tasks), a send starts only while at least half the lease is left,
and senders must give up within that half.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from django.db import Error as DatabaseError
from django.db import close_old_connections, connection

from qim.clock import now_ms as wall_clock_ms
from qim.models import Device, PushTask
from qim.actions.push import (
    claim_tasks,
    lease_ms,
    mark_sent,
    next_claimable_ms,
    prune_finished,
    record_failure,
    release_claims,
)
from qim.actions.accounts import clear_rejected_push_token
from qim.push.senders import PushSender, PushSendError

__all__ = ["Outcome", "Tally", "claim_tasks", "drain", "run_forever", "run_once", "send_claimed"]

logger = logging.getLogger(__name__)

Clock = Callable[[], int]
# How often a long-running worker deletes finished tasks past their retention.
PRUNE_EVERY_MS = 60_000
NO_CREDENTIALS = "device has no push credentials (push_token and voip_token are empty)"


class Outcome(StrEnum):
    SENT = "sent"
    RETRIED = "retried"  # failed, back to pending with backoff
    FAILED = "failed"  # out of attempts, permanent error, or no credentials
    LOST = "lost"  # the claim was taken over before we could settle it
    RELEASED = "released"  # not tried: claim given back


@dataclass
class Tally:
    """What a worker did; `handled` counts the tasks it settled (sent, retried, failed)."""

    sent: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    pruned: int = 0  # finished tasks deleted past their retention

    def add(self, outcome: Outcome, count: int = 1) -> None:
        setattr(self, outcome.value, getattr(self, outcome.value) + count)

    @property
    def handled(self) -> int:
        return self.sent + self.retried + self.failed

    def report(self) -> dict[str, int]:
        return {"sent": self.sent, "failed": self.failed, "retried": self.retried}


def has_credentials(device: Device) -> bool:
    return bool(device.push_token or device.voip_token)


def send_claimed(task: PushTask, sender: PushSender, now_ms: int) -> Outcome:
    """Send one task this worker claimed, then settle it (sent, retried or failed).

    Must run outside any transaction: the provider call can be slow and must hold no locks.
    `now_ms` is when the send starts; sent_at_ms and the retry backoff count from it. A
    device that lost its credentials fails the task permanently without a send. Settling is
    fenced by the claim, so if the lease ran out and another worker took the task, nothing is
    written and the answer is LOST (the push may then go out twice: at least once).
    """
    if now_ms >= task.claimed_until_ms - lease_ms() // 2:
        release_claims([task])
        return Outcome.RELEASED
    device = task.device
    if not has_credentials(device):
        return _settle_failure(task, NO_CREDENTIALS, permanent=True, now_ms=now_ms)
    try:
        sender.send(task, device)
    except PushSendError as exc:
        if exc.rejected_token:
            clear_rejected_push_token(device.pk, exc.rejected_token)
        not_before_ms = now_ms + int(exc.retry_after_s * 1000) if exc.retry_after_s is not None else None
        return _settle_failure(
            task, f"PushSendError: {exc}", permanent=exc.permanent, now_ms=now_ms, not_before_ms=not_before_ms
        )
    except Exception as exc:  # any other failure of the provider is the task's, not the worker's
        return _settle_failure(task, f"{type(exc).__name__}: {exc}", permanent=False, now_ms=now_ms)
    if mark_sent(task, now_ms):
        return Outcome.SENT
    logger.warning("push task %s: sent after its claim was taken over; it may go out twice", task.id)
    return Outcome.LOST


def _settle_failure(
    task: PushTask, error: str, *, permanent: bool, now_ms: int, not_before_ms: int | None = None
) -> Outcome:
    state = record_failure(task, error, permanent=permanent, now_ms=now_ms, not_before_ms=not_before_ms)
    if state is None:
        logger.warning("push task %s: failed after its claim was taken over: %s", task.id, error)
        return Outcome.LOST
    if state == PushTask.FAILED:
        logger.warning("push task %s failed for good after %s attempts: %s", task.id, task.attempts, error)
        return Outcome.FAILED
    logger.info("push task %s: attempt %s failed, retry at %s: %s", task.id, task.attempts, task.available_at_ms, error)
    return Outcome.RETRIED


def run_once(
    worker_id: str,
    sender: PushSender,
    batch: int = 100,
    *,
    clock: Clock = wall_clock_ms,
    stop_event: threading.Event | None = None,
    tally: Tally | None = None,
) -> int:
    """Claim one batch and send it; answers how many tasks were settled.

    Stops after the current task when `stop_event` is set, or when the claim has too little
    lease left to start another send; the claims not tried are released at once.
    """
    tally = tally if tally is not None else Tally()
    settled_before = tally.handled
    tasks = claim_tasks(worker_id, batch, clock())
    for index, task in enumerate(tasks):
        if stop_event is not None and stop_event.is_set():
            tally.add(Outcome.RELEASED, release_claims(tasks[index:]))
            break
        outcome = send_claimed(task, sender, clock())
        if outcome is Outcome.RELEASED:
            tally.add(Outcome.RELEASED, 1 + release_claims(tasks[index + 1 :]))
            break
        tally.add(outcome)
    return tally.handled - settled_before


def drain(
    worker_id: str,
    sender: PushSender,
    batch: int = 100,
    horizon_s: float = 0.0,
    *,
    clock: Clock = wall_clock_ms,
    stop_event: threading.Event | None = None,
) -> Tally:
    """Send until no task is claimable now or within `horizon_s` (`qim_push_worker --once`).

    With a horizon the worker waits for retries and expiring claims that fall within it, so
    one run can see a flaky task through its backoff; tasks further out are left for later.
    """
    stop_event = stop_event or threading.Event()
    tally = Tally()
    while not stop_event.is_set():
        if run_once(worker_id, sender, batch, clock=clock, stop_event=stop_event, tally=tally):
            continue
        now = clock()
        at = next_claimable_ms(now, int(horizon_s * 1000))
        if at is None:
            break
        stop_event.wait(max(at - now, 0) / 1000)
    return tally


def run_forever(
    worker_id: str,
    sender: PushSender,
    idle_sleep_s: float,
    stop_event: threading.Event,
    batch: int = 100,
    *,
    clock: Clock = wall_clock_ms,
    tally: Tally | None = None,
) -> Tally:
    """Send batches until `stop_event` is set, sleeping `idle_sleep_s` when nothing is due;
    every PRUNE_EVERY_MS, delete finished tasks past QIM_PUSH_TASK_RETENTION_S.

    A database error (a restart, a failover) is logged and retried after the idle sleep;
    the worker's connection is checked between batches so a broken one is replaced.
    """
    tally = tally if tally is not None else Tally()  # given: the worker's /metrics reads it live
    next_prune_ms = clock()
    while not stop_event.is_set():
        _drop_unusable_connection()
        try:
            settled = run_once(worker_id, sender, batch, clock=clock, stop_event=stop_event, tally=tally)
            if clock() >= next_prune_ms:
                tally.pruned += prune_finished(clock())
                next_prune_ms = clock() + PRUNE_EVERY_MS
        except DatabaseError:
            logger.exception("push worker %s: database error, retrying in %ss", worker_id, idle_sleep_s)
            settled = 0
        if not settled:
            stop_event.wait(idle_sleep_s)
    return tally


def _drop_unusable_connection() -> None:
    # Long-running commands get no request_finished signal, so nothing else closes a dead
    # connection. Inside a transaction (tests wrap one around everything) it must stay open.
    if not connection.in_atomic_block:
        close_old_connections()
