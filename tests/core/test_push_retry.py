"""The admin's push retry (qim.actions.push.do_retry_tasks) on each state, in process: what it
makes due, what it leaves alone so that no push is sent twice."""

from __future__ import annotations

import pytest

from qim.actions.accounts import do_create_user, do_issue_token
from qim.actions.push import do_retry_tasks
from qim.models import Device, PushTask, Tenant

pytestmark = pytest.mark.django_db
NOW = 1_800_000_000_000


@pytest.fixture
def phone() -> Device:
    alice = do_create_user(Tenant.objects.create(name="acme"), "alice", "pw")
    do_issue_token(alice, "phone")
    return Device.objects.get(user=alice, device_id="phone")


def task(device: Device, **fields: object) -> PushTask:
    values = {"available_at_ms": NOW - 1000, "created_at_ms": NOW - 5000, **fields}
    return PushTask.objects.create(tenant=device.user.tenant, user=device.user, device=device,
                                   payload={"body": "hi"}, **values)


def test_retry_requeues_failed_hurries_backoff_and_leaves_claimed_sent_and_due_tasks(phone: Device) -> None:
    failed = task(phone, state=PushTask.FAILED, attempts=8, last_error="410 gone")
    backing_off = task(phone, attempts=3, available_at_ms=NOW + 60_000)
    claimed = task(phone, attempts=1, available_at_ms=NOW + 60_000, claimed_by="w1", claimed_until_ms=NOW + 20_000)
    sent = task(phone, state=PushTask.SENT, attempts=1, sent_at_ms=NOW - 500)
    due = task(phone)

    counts = do_retry_tasks([t.id for t in (failed, backing_off, claimed, sent, due)], NOW)

    assert counts == {"requeued": 1, "hurried": 1, "skipped": 3}
    rows = {t.id: t for t in PushTask.objects.all()}
    assert (rows[failed.id].state, rows[failed.id].attempts, rows[failed.id].available_at_ms) == ("pending", 0, NOW)
    assert rows[failed.id].last_error == "410 gone"  # why it failed stays until the next try
    assert (rows[backing_off.id].available_at_ms, rows[backing_off.id].attempts) == (NOW, 3)
    assert (rows[claimed.id].available_at_ms, rows[claimed.id].claimed_by) == (NOW + 60_000, "w1")
    assert (rows[sent.id].state, rows[sent.id].sent_at_ms) == ("sent", NOW - 500)
    assert rows[due.id].available_at_ms == NOW - 1000


def test_a_claim_that_expired_is_no_longer_held_so_its_task_is_hurried(phone: Device) -> None:
    stale = task(phone, available_at_ms=NOW + 60_000, claimed_by="dead", claimed_until_ms=NOW - 1)
    assert do_retry_tasks([stale.id], NOW) == {"requeued": 0, "hurried": 1, "skipped": 0}
    assert PushTask.objects.get(id=stale.id).available_at_ms == NOW
