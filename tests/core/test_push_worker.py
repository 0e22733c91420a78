"""The push worker in process: claiming, sending, retry and backoff, leases, on a fake clock."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from django.core.management import call_command
from django.test import override_settings

from qim.actions.accounts import do_create_user, do_issue_token
from qim.models import Device, PushTask, Tenant
from qim.actions.push import MAX_RETRY_DELAY_MS, next_claimable_ms, prune_finished, retry_delay_ms
from qim.push.senders import PushSendError, load_sender, request_timeout_s
from qim.push.worker import (
    NO_CREDENTIALS,
    Outcome,
    claim_tasks,
    drain,
    run_forever,
    run_once,
    send_claimed,
)
from tests.harness.push_senders import read_outbox

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000  # the fake clock's start, in ms
LEASE_MS = 30_000  # settings.QIM_PUSH_LEASE_S
BASE_MS = 2_000  # settings.QIM_PUSH_RETRY_BASE_S


@dataclass
class RecordingSender:
    """Records (task id, device id, attempts before) per send; fails while `failures` says."""

    sent: list[tuple[int, str, int]] = field(default_factory=list)
    failures: int = 0
    permanent: bool = False
    during_send: Callable[[PushTask], None] | None = None

    def send(self, task: PushTask, device: Device) -> None:
        self.sent.append((task.id, device.device_id, task.attempts))
        if self.during_send is not None:
            self.during_send(task)
        if self.failures:
            self.failures -= 1
            raise PushSendError("provider said 503", permanent=self.permanent)


@pytest.fixture
def acme() -> Tenant:
    return Tenant.objects.create(name="acme")


@pytest.fixture
def alice_phone(acme: Tenant) -> Device:
    alice = do_create_user(acme, "alice", "pw")
    do_issue_token(alice, "phone")
    device = Device.objects.get(user=alice, device_id="phone")
    device.push_platform, device.push_token = "apns", "apns-token-alice"
    device.save()
    return device


@pytest.fixture
def bob_laptop(acme: Tenant) -> Device:
    """A device that never registered push credentials (or lost them)."""
    bob = do_create_user(acme, "bob", "pw")
    do_issue_token(bob, "laptop")
    return Device.objects.get(user=bob, device_id="laptop")


def make_task(device: Device, at_ms: int = T0, **fields: object) -> PushTask:
    return PushTask.objects.create(
        tenant=device.user.tenant,
        user=device.user,
        device=device,
        payload={"title": "alice", "body": "hi", "badge": 1},
        available_at_ms=at_ms,
        created_at_ms=T0,
        **fields,
    )


def clock_at(ms: int) -> Callable[[], int]:
    return lambda: ms


def test_a_due_task_is_sent_once_and_marked_sent(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    sender = RecordingSender()
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    assert run_once("w1", sender, clock=clock_at(T0 + 1)) == 0
    assert sender.sent == [(task.id, "phone", 0)]
    task.refresh_from_db()
    assert (task.state, task.sent_at_ms, task.attempts) == (PushTask.SENT, T0, 1)
    assert (task.claimed_by, task.claimed_until_ms, task.last_error) == ("", 0, "")


def test_a_task_not_yet_due_is_not_claimed(alice_phone: Device) -> None:
    task = make_task(alice_phone, at_ms=T0 + 5_000)
    assert claim_tasks("w1", 10, T0 + 4_999) == []
    task.refresh_from_db()
    assert (task.state, task.claimed_by, task.claimed_until_ms) == (PushTask.PENDING, "", 0)
    assert [t.id for t in claim_tasks("w1", 10, T0 + 5_000)] == [task.id]


def test_claims_take_the_oldest_first_and_respect_the_limit(alice_phone: Device) -> None:
    tasks = [make_task(alice_phone) for _ in range(5)]
    first = claim_tasks("w1", 3, T0)
    assert [t.id for t in first] == [t.id for t in tasks[:3]]
    assert {(t.claimed_by, t.claimed_until_ms) for t in first} == {("w1", T0 + LEASE_MS)}
    assert [t.id for t in claim_tasks("w2", 10, T0)] == [t.id for t in tasks[3:]]
    assert claim_tasks("w3", 10, T0) == []


def test_a_failure_is_retried_with_backoff_then_sent(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    sender = RecordingSender(failures=1)
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts, task.available_at_ms) == (PushTask.PENDING, 1, T0 + BASE_MS)
    assert task.last_error == "PushSendError: provider said 503"
    assert (task.claimed_by, task.claimed_until_ms) == ("", 0)

    assert run_once("w1", sender, clock=clock_at(T0 + BASE_MS - 1)) == 0
    assert run_once("w1", sender, clock=clock_at(T0 + BASE_MS)) == 1
    assert sender.sent == [(task.id, "phone", 0), (task.id, "phone", 1)]
    task.refresh_from_db()
    assert (task.state, task.attempts, task.sent_at_ms) == (PushTask.SENT, 2, T0 + BASE_MS)
    assert task.last_error == "PushSendError: provider said 503"  # kept: why it was late


@override_settings(QIM_PUSH_MAX_ATTEMPTS=3)
def test_a_task_that_keeps_failing_ends_failed_after_max_attempts(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    sender = RecordingSender(failures=99)
    now, retry_times = T0, []
    for _ in range(3):
        assert run_once("w1", sender, clock=clock_at(now)) == 1
        task.refresh_from_db()
        retry_times.append(task.available_at_ms - now)
        now = task.available_at_ms
    assert (task.state, task.attempts) == (PushTask.FAILED, 3)
    assert retry_times[:2] == [BASE_MS, 2 * BASE_MS]  # the third try gave up: no new time
    assert run_once("w1", sender, clock=clock_at(now + 10**9)) == 0
    assert len(sender.sent) == 3
    assert PushTask.objects.filter(id=task.id).exists()  # never deleted


def test_a_permanent_error_fails_the_task_at_once(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    sender = RecordingSender(failures=1, permanent=True)
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts, task.last_error) == (
        PushTask.FAILED, 1, "PushSendError: provider said 503",
    )


def test_any_other_exception_counts_as_a_transient_failure(alice_phone: Device) -> None:
    task = make_task(alice_phone)

    class Broken:
        def send(self, task: PushTask, device: Device) -> None:
            raise TimeoutError("apns did not answer")

    [claimed] = claim_tasks("w1", 1, T0)
    assert send_claimed(claimed, Broken(), T0) is Outcome.RETRIED
    task.refresh_from_db()
    assert (task.state, task.last_error) == (PushTask.PENDING, "TimeoutError: apns did not answer")


def test_a_device_without_credentials_fails_its_task_without_a_send(bob_laptop: Device) -> None:
    task = make_task(bob_laptop)
    sender = RecordingSender()
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    assert sender.sent == []
    task.refresh_from_db()
    assert (task.state, task.attempts, task.last_error) == (PushTask.FAILED, 1, NO_CREDENTIALS)


def test_a_voip_token_alone_is_enough_credentials(bob_laptop: Device) -> None:
    bob_laptop.push_platform, bob_laptop.voip_token = "apns", "voip-token-bob"
    bob_laptop.save()
    make_task(bob_laptop, kind=PushTask.VOIP)
    sender = RecordingSender()
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    assert len(sender.sent) == 1


def test_an_expired_claim_of_a_dead_worker_is_taken_over(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    assert [t.id for t in claim_tasks("dead", 10, T0)] == [task.id]  # ...then it dies
    sender = RecordingSender()
    assert run_once("live", sender, clock=clock_at(T0 + LEASE_MS - 1)) == 0
    assert next_claimable_ms(T0 + LEASE_MS - 1, horizon_ms=0) is None
    assert next_claimable_ms(T0 + LEASE_MS - 1, horizon_ms=10) == T0 + LEASE_MS + 1
    assert run_once("live", sender, clock=clock_at(T0 + LEASE_MS + 1)) == 1
    task.refresh_from_db()
    assert (task.state, task.sent_at_ms) == (PushTask.SENT, T0 + LEASE_MS + 1)
    assert sender.sent == [(task.id, "phone", 0)]


def test_a_worker_whose_lease_expired_cannot_settle_a_task_taken_over(alice_phone: Device) -> None:
    """w1's send outlives its lease; w2 takes the task over meanwhile. w1's mark-sent and
    w2's send both happen (at least once), but the row is settled by w2 alone."""
    task = make_task(alice_phone)
    [stale] = claim_tasks("w1", 1, T0)
    taken: list[PushTask] = []
    slow = RecordingSender(during_send=lambda _: taken.extend(claim_tasks("w2", 1, T0 + LEASE_MS + 1)))
    assert send_claimed(stale, slow, T0) is Outcome.LOST
    task.refresh_from_db()
    assert (task.state, task.claimed_by, task.attempts) == (PushTask.PENDING, "w2", 0)

    assert send_claimed(taken[0], RecordingSender(), T0 + LEASE_MS + 2) is Outcome.SENT
    task.refresh_from_db()
    assert (task.state, task.sent_at_ms, task.attempts) == (PushTask.SENT, T0 + LEASE_MS + 2, 1)


def test_a_stale_failure_does_not_touch_a_task_taken_over(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    [stale] = claim_tasks("w1", 1, T0)
    slow = RecordingSender(failures=1, during_send=lambda _: claim_tasks("w2", 1, T0 + LEASE_MS + 1))
    assert send_claimed(stale, slow, T0) is Outcome.LOST
    task.refresh_from_db()
    assert (task.state, task.claimed_by, task.attempts, task.last_error) == (PushTask.PENDING, "w2", 0, "")


def test_the_same_worker_id_cannot_settle_an_older_claim(alice_phone: Device) -> None:
    """The fence is the claim, not just the worker id: a restarted worker reusing its id."""
    task = make_task(alice_phone)
    [old] = claim_tasks("w1", 1, T0)
    [new] = claim_tasks("w1", 1, T0 + LEASE_MS + 1)
    assert send_claimed(old, RecordingSender(), T0 + 1) is Outcome.LOST
    assert send_claimed(new, RecordingSender(), T0 + LEASE_MS + 2) is Outcome.SENT
    task.refresh_from_db()
    assert task.attempts == 1


def test_no_send_starts_with_less_than_half_the_lease_left(alice_phone: Device) -> None:
    tasks = [make_task(alice_phone) for _ in range(3)]
    times = iter([T0, T0, T0 + LEASE_MS // 2])  # claim, first send, then the batch ran long
    sender = RecordingSender()
    assert run_once("w1", sender, clock=lambda: next(times)) == 1
    assert [sent[0] for sent in sender.sent] == [tasks[0].id]
    rest = PushTask.objects.filter(id__in=[t.id for t in tasks[1:]])
    assert {(t.state, t.claimed_by, t.claimed_until_ms, t.attempts) for t in rest} == {
        (PushTask.PENDING, "", 0, 0)
    }


def test_a_stop_finishes_the_current_task_and_releases_the_rest(alice_phone: Device) -> None:
    tasks = [make_task(alice_phone) for _ in range(3)]
    stop = threading.Event()
    sender = RecordingSender(during_send=lambda _: stop.set())  # SIGTERM arrives mid-send
    tally = run_forever("w1", sender, idle_sleep_s=0.01, stop_event=stop, clock=clock_at(T0))
    assert (tally.sent, tally.released) == (1, 2)
    states = dict(PushTask.objects.values_list("id", "state"))
    assert states == {tasks[0].id: "sent", tasks[1].id: "pending", tasks[2].id: "pending"}
    assert claim_tasks("w2", 10, T0 + 1) != []  # released, not left to expire


def test_run_forever_idles_until_stopped(alice_phone: Device) -> None:
    stop = threading.Event()
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    tally = run_forever("w1", RecordingSender(), idle_sleep_s=0.05, stop_event=stop, clock=clock_at(T0))
    timer.join()
    assert tally.handled == 0


DAY_MS = 24 * 3600 * 1000


def test_finished_tasks_are_pruned_after_the_retention_and_pending_ones_never(alice_phone: Device) -> None:
    old_sent = make_task(alice_phone, state=PushTask.SENT, sent_at_ms=T0)
    old_failed = make_task(alice_phone, state=PushTask.FAILED)
    old_pending = make_task(alice_phone)  # due long ago, never sent: still owed
    recent_sent = make_task(alice_phone, at_ms=T0 + 6 * DAY_MS, state=PushTask.SENT)
    later = T0 + 7 * DAY_MS + 1  # the default retention: 7 days
    assert prune_finished(later - 2) == 0
    assert prune_finished(later, limit=1) == 1  # in bounded batches
    assert prune_finished(later) == 1
    assert set(PushTask.objects.values_list("id", flat=True)) == {old_pending.id, recent_sent.id}
    assert not PushTask.objects.filter(id__in=[old_sent.id, old_failed.id]).exists()
    with override_settings(QIM_PUSH_TASK_RETENTION_S=0):  # 0 keeps everything
        assert prune_finished(T0 + 365 * DAY_MS) == 0


def test_run_forever_prunes_what_is_past_the_retention(alice_phone: Device) -> None:
    make_task(alice_phone, state=PushTask.SENT, sent_at_ms=T0)
    stop = threading.Event()
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    with override_settings(QIM_PUSH_TASK_RETENTION_S=60):
        tally = run_forever("w1", RecordingSender(), idle_sleep_s=0.05, stop_event=stop, clock=clock_at(T0 + 61_000))
    timer.join()
    assert tally.pruned == 1 and PushTask.objects.count() == 0


def test_drain_sends_everything_due_and_reports(alice_phone: Device, bob_laptop: Device) -> None:
    for _ in range(5):
        make_task(alice_phone)
    make_task(bob_laptop)
    make_task(alice_phone, at_ms=T0 + 60_000)  # not due: left alone
    sender = RecordingSender(failures=2)
    tally = drain("w1", sender, batch=2, clock=clock_at(T0))
    assert tally.report() == {"sent": 3, "failed": 1, "retried": 2}
    assert PushTask.objects.filter(state=PushTask.PENDING).count() == 3


def test_backoff_doubles_and_is_capped() -> None:
    assert [retry_delay_ms(n) for n in (1, 2, 3, 4)] == [2_000, 4_000, 8_000, 16_000]
    assert retry_delay_ms(12) == MAX_RETRY_DELAY_MS
    assert retry_delay_ms(10_000) == MAX_RETRY_DELAY_MS
    with override_settings(QIM_PUSH_RETRY_BASE_S=0.01):
        assert retry_delay_ms(1) == 10


def test_the_command_drains_once_and_prints_json(
    alice_phone: Device, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    monkeypatch.setenv("QIM_TEST_PUSH_OUTBOX", str(outbox))
    tasks = [make_task(alice_phone, at_ms=0) for _ in range(3)]
    with override_settings(QIM_PUSH_SENDER="tests.harness.push_senders.JsonlFileSender"):
        call_command("qim_push_worker", "--once", "--batch", "2", "--worker-id", "cmd")
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {
        "sent": 3, "failed": 0, "retried": 0,
    }
    lines = read_outbox(outbox)
    assert [line["task_id"] for line in lines] == [t.id for t in tasks]
    assert lines[0]["device_id"] == "phone" and lines[0]["attempt"] == 1
    assert lines[0]["payload"] == {"title": "alice", "body": "hi", "badge": 1}


def test_the_default_sender_logs_like_log_sender_when_no_provider_is_configured(
    alice_phone: Device, caplog: pytest.LogCaptureFixture
) -> None:
    sender = load_sender()
    assert type(sender).__name__ == "ProviderSender"
    make_task(alice_phone)
    with caplog.at_level(logging.INFO, logger="qim.push.senders"):
        assert run_once("w1", sender, clock=clock_at(T0)) == 1
    [line] = [r.getMessage() for r in caplog.records if r.name == "qim.push.senders"]
    assert line == (
        'push tenant=acme user=alice device=phone platform=apns kind=message '
        'payload={"badge":1,"body":"hi","title":"alice"}'
    )


# What a provider's answer does to the outbox (PushSendError's rejected_token and retry_after_s).


@dataclass
class AnsweringSender:
    """Raises `error` on every send, after running `during_send` (a device re-registering)."""

    error: PushSendError
    during_send: Callable[[Device], None] | None = None
    sent: int = 0

    def send(self, task: PushTask, device: Device) -> None:
        self.sent += 1
        if self.during_send is not None:
            self.during_send(device)
        raise self.error


def test_a_rejected_token_is_cleared_and_its_task_fails(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    alice_phone.voip_token = "voip-token-alice"
    alice_phone.save()
    sender = AnsweringSender(PushSendError("410 Unregistered", rejected_token="apns-token-alice"))
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    task.refresh_from_db()
    alice_phone.refresh_from_db()
    assert (task.state, task.attempts, task.last_error) == (PushTask.FAILED, 1, "PushSendError: 410 Unregistered")
    assert (alice_phone.push_platform, alice_phone.push_token, alice_phone.voip_token) == ("apns", "", "voip-token-alice")


def test_a_rejected_voip_token_clears_only_the_voip_token(alice_phone: Device) -> None:
    alice_phone.voip_token = "voip-token-alice"
    alice_phone.save()
    make_task(alice_phone, kind=PushTask.VOIP)
    sender = AnsweringSender(PushSendError("400 BadDeviceToken", rejected_token="voip-token-alice"))
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    alice_phone.refresh_from_db()
    assert (alice_phone.push_token, alice_phone.voip_token) == ("apns-token-alice", "")


def test_a_device_that_registered_a_new_token_meanwhile_keeps_it(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    later = make_task(alice_phone)

    def re_register(device: Device) -> None:  # the app got a fresh token while the push was out
        Device.objects.filter(pk=device.pk).update(push_token="apns-token-alice-new")

    sender = AnsweringSender(PushSendError("410 Unregistered", rejected_token="apns-token-alice"), re_register)
    [claimed] = claim_tasks("w1", 1, T0)
    assert send_claimed(claimed, sender, T0) is Outcome.FAILED
    alice_phone.refresh_from_db()
    task.refresh_from_db()
    assert alice_phone.push_token == "apns-token-alice-new"
    assert task.state == PushTask.FAILED
    # The next task goes to the new token.
    recorder = RecordingSender()
    assert run_once("w1", recorder, clock=clock_at(T0)) == 1
    assert recorder.sent == [(later.id, "phone", 0)]


def test_a_web_push_subscription_rejected_is_cleared_too(bob_laptop: Device) -> None:
    subscription = '{"endpoint":"https://fcm.googleapis.com/fcm/send/x","keys":{"p256dh":"B","auth":"a"}}'
    bob_laptop.push_platform, bob_laptop.push_token = "web", subscription
    bob_laptop.save()
    task = make_task(bob_laptop)
    assert run_once("w1", AnsweringSender(PushSendError("410 Gone", rejected_token=subscription)), clock=clock_at(T0)) == 1
    bob_laptop.refresh_from_db()
    task.refresh_from_db()
    assert (bob_laptop.push_token, task.state) == ("", PushTask.FAILED)


def test_retry_after_holds_the_task_back_even_when_the_backoff_is_shorter(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    sender = AnsweringSender(PushSendError("429 TooManyRequests", retry_after_s=60))
    assert run_once("w1", sender, clock=clock_at(T0)) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts, task.available_at_ms) == (PushTask.PENDING, 1, T0 + 60_000)
    assert run_once("w1", sender, clock=clock_at(T0 + BASE_MS)) == 0  # the backoff alone would be due
    assert run_once("w1", sender, clock=clock_at(T0 + 59_999)) == 0
    assert sender.sent == 1
    assert [t.id for t in claim_tasks("w1", 10, T0 + 60_000)] == [task.id]


def test_a_retry_after_shorter_than_the_backoff_does_not_bring_the_retry_forward(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    assert run_once("w1", AnsweringSender(PushSendError("503", retry_after_s=0.5)), clock=clock_at(T0)) == 1
    task.refresh_from_db()
    assert (task.state, task.available_at_ms) == (PushTask.PENDING, T0 + BASE_MS)


@override_settings(QIM_PUSH_MAX_ATTEMPTS=1)
def test_retry_after_on_the_last_attempt_still_fails_the_task(alice_phone: Device) -> None:
    task = make_task(alice_phone)
    assert run_once("w1", AnsweringSender(PushSendError("429", retry_after_s=60)), clock=clock_at(T0)) == 1
    task.refresh_from_db()
    assert (task.state, task.available_at_ms) == (PushTask.FAILED, T0)


@pytest.mark.parametrize(
    ("timeout_s", "lease_s", "expected"), [(10.0, 30.0, 10.0), (20.0, 30.0, 12.0), (5.0, 4.0, 1.6), (0.5, 30.0, 0.5)]
)
def test_a_provider_request_may_take_at_most_40_percent_of_the_lease(
    timeout_s: float, lease_s: float, expected: float
) -> None:
    with override_settings(QIM_PUSH_REQUEST_TIMEOUT_S=timeout_s, QIM_PUSH_LEASE_S=lease_s):
        assert request_timeout_s() == pytest.approx(expected)
        assert request_timeout_s() < lease_s / 2  # a send ends within the half lease it started in


def test_the_command_reports_the_default_senders_counters_per_provider(
    alice_phone: Device, bob_laptop: Device, capsys: pytest.CaptureFixture[str]
) -> None:
    make_task(alice_phone, at_ms=0)
    make_task(bob_laptop, at_ms=0)  # no credentials: failed by the worker, not the provider
    call_command("qim_push_worker", "--once", "--worker-id", "cmd")
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {k: report[k] for k in ("sent", "failed", "retried")} == {"sent": 1, "failed": 1, "retried": 0}
    # No provider is configured here: the push was logged, and counted under "log".
    assert set(report["providers"]) == {"log"}
    assert {k: report["providers"]["log"][k] for k in ("sent", "failed", "retried")} == {
        "sent": 1, "failed": 0, "retried": 0}
    assert report["providers"]["log"]["latency_ms_max"] >= report["providers"]["log"]["latency_ms_mean"] >= 0


class StatsThenStopSender:
    """Sends once per task; after its first send, waits for the worker's periodic stats line,
    then asks the worker to stop as SIGTERM would."""

    seen_stats = threading.Event()

    def __init__(self) -> None:
        self.sent = 0

    def send(self, task: PushTask, device: Device) -> None:
        self.sent += 1
        assert self.seen_stats.wait(120), "no periodic stats line was logged"
        os.kill(os.getpid(), signal.SIGTERM)

    def report(self) -> dict[str, dict[str, int]]:
        return {"fake": {"sent": self.sent, "failed": 0, "retried": 0}}


class StatsLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = json.loads(record.getMessage())
        self.lines.append(line)
        if line["providers"]["fake"]["sent"] >= 1:
            StatsThenStopSender.seen_stats.set()


def test_forever_mode_logs_the_counters_periodically_and_at_exit(
    alice_phone: Device, capsys: pytest.CaptureFixture[str]
) -> None:
    make_task(alice_phone, at_ms=0)
    handler = StatsLines()
    command_logger = logging.getLogger("qim.management.commands.qim_push_worker")
    command_logger.addHandler(handler)
    StatsThenStopSender.seen_stats.clear()
    try:
        with override_settings(QIM_PUSH_SENDER=f"{__name__}.StatsThenStopSender", QIM_PUSH_STATS_INTERVAL_S=0.05):
            call_command("qim_push_worker", "--worker-id", "forever", "--idle-sleep", "0.05")
    finally:
        command_logger.removeHandler(handler)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report == {"sent": 1, "failed": 0, "retried": 0, "providers": {"fake": {"sent": 1, "failed": 0, "retried": 0}}}
    assert len(handler.lines) >= 2  # at least one periodic line, and the one at exit
    assert {line["event"] for line in handler.lines} == {"push_worker_stats"}
    assert {line["worker_id"] for line in handler.lines} == {"forever"}
    assert handler.lines[-1]["providers"] == report["providers"]
