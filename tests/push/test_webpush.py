"""WebPushSender through the real worker loop against the Web Push stand-in: what the browser
would decrypt, and what each push service answer does to the task and the device."""

from __future__ import annotations

import base64
import json
import string
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from django.test import override_settings

from qim.actions.accounts import do_create_user, do_issue_token
from qim.clock import now_ms
from qim.models import Device, PushTask, Tenant
from qim.push.web_subscription import canonical_subscription
from qim.push.worker import Outcome, claim_tasks, run_once, send_claimed
from push_providers.credentials import VapidCredentials, new_vapid_key_pem
from push_providers.dispatch import ProviderSender
from push_providers.retry_after import retry_after_s
from push_providers.vapid_jwt import JWT_LIFETIME_S, VapidJwtCache
from push_providers.webpush import MAX_BODY_BYTES, MAX_PLAINTEXT_BYTES, MESSAGE_TTL_S
from tests.harness.push_standins.webpush import Answer, WebPushStandIn, running_webpush_standin

pytestmark = pytest.mark.django_db

SUBJECT = "mailto:push-admin@example.com"
VAPID_KEY = new_vapid_key_pem()
HOUR_MS = 3600 * 1000


@pytest.fixture(scope="module")
def push() -> Iterator[WebPushStandIn]:
    with running_webpush_standin() as standin:
        yield standin


@pytest.fixture(autouse=True)
def web_push_settings() -> Iterator[None]:
    with override_settings(
        QIM_VAPID_PRIVATE_KEY=VAPID_KEY, QIM_VAPID_SUBJECT=SUBJECT,
        QIM_WEB_PUSH_ENDPOINT_HOSTS=["127.0.0.1"], QIM_WEB_PUSH_ALLOW_HTTP=True,
    ):
        yield


@pytest.fixture
def acme() -> Tenant:
    return Tenant.objects.create(name="acme")


_serial = iter(range(1, 10_000))


def browser_device(tenant: Tenant, push: WebPushStandIn) -> tuple[Device, str]:
    """A user whose laptop subscribed at the stand-in; answers (device, subscription name)."""
    name = f"laptop{next(_serial)}"
    user = do_create_user(tenant, f"bob-{name}", "pw")
    do_issue_token(user, "laptop")
    device = Device.objects.get(user=user, device_id="laptop")
    device.push_platform, device.push_token = "web", canonical_subscription(push.subscribe(name))
    device.save()
    return device, name


def message_task(device: Device, preview: str = "hello bob", **payload: object) -> PushTask:
    now = now_ms()
    body = {"conversation_id": 41, "conversation_seq": 7, "sender_id": "alice", "preview": preview, "badge": 3}
    return PushTask.objects.create(
        tenant=device.user.tenant, user=device.user, device=device, kind=PushTask.MESSAGE,
        payload={**body, **payload}, available_at_ms=now, created_at_ms=now,
    )


def call_task(device: Device, ring_deadline_ms: int) -> PushTask:
    now = now_ms()
    payload = {
        "type": "rtc.invite", "call_id": "call-1", "conversation_id": 41, "caller_id": "alice",
        "ring_deadline_ms": ring_deadline_ms, "use_token": "push_token",
    }
    return PushTask.objects.create(
        tenant=device.user.tenant, user=device.user, device=device, kind=PushTask.VOIP,
        payload=payload, available_at_ms=now, created_at_ms=now,
    )


def run(sender: ProviderSender, at_ms: int | None = None) -> int:
    return run_once("w1", sender, clock=(lambda: at_ms) if at_ms else now_ms)


def test_a_message_push_arrives_decrypted_with_ttl_urgency_and_topic(acme: Tenant, push: WebPushStandIn) -> None:
    device, name = browser_device(acme, push)
    task = message_task(device)
    sender = ProviderSender()
    assert run(sender) == 1

    [got] = push.wait_received(name, 1)
    assert got.payload == {
        "type": "message", "conversation_id": 41, "conversation_seq": 7, "sender_id": "alice",
        "preview": "hello bob", "badge": 3,
    }
    assert got.headers["ttl"] == str(MESSAGE_TTL_S) and got.headers["urgency"] == "normal"
    # The Topic is the conversation's keyed digest (32 base64url characters), not its id.
    topic = got.headers["topic"]
    assert len(topic) == 32 and topic != "41" and set(topic) <= set(string.ascii_letters + string.digits + "-_")
    assert got.claims["aud"] == push.base_url and got.claims["sub"] == SUBJECT
    assert got.claims["exp"] <= time.time() + 24 * 3600
    task.refresh_from_db()
    assert (task.state, task.attempts, task.last_error) == (PushTask.SENT, 1, "")
    assert sender.report()["web"]["sent"] == 1 and push.refusals == []


def test_two_conversations_get_two_topics_one_conversation_one(acme: Tenant, push: WebPushStandIn) -> None:
    device, name = browser_device(acme, push)
    message_task(device, conversation_seq=8)
    message_task(device, conversation_seq=9)
    message_task(device, conversation_id=42)
    assert run(ProviderSender()) == 3
    topics = [r.headers["topic"] for r in push.wait_received(name, 3)]
    assert topics[0] == topics[1] != topics[2]


def test_a_call_push_is_high_urgency_and_lives_until_the_ring_deadline(acme: Tenant, push: WebPushStandIn) -> None:
    device, name = browser_device(acme, push)
    deadline = now_ms() + 45_000
    call_task(device, deadline)
    assert run(ProviderSender()) == 1
    [got] = push.wait_received(name, 1)
    assert got.payload == {
        "type": "rtc.invite", "call_id": "call-1", "conversation_id": 41, "caller_id": "alice",
        "ring_deadline_ms": deadline,
    }
    assert got.headers["urgency"] == "high" and "topic" not in got.headers
    assert 0 < int(got.headers["ttl"]) <= 45


def test_a_call_push_past_its_ring_deadline_is_not_sent(acme: Tenant, push: WebPushStandIn) -> None:
    device, name = browser_device(acme, push)
    task = call_task(device, now_ms() - 1)
    assert run(ProviderSender()) == 1
    task.refresh_from_db()
    assert task.state == PushTask.FAILED and "ring deadline passed" in task.last_error
    assert push.received(name, None) == []


@pytest.mark.parametrize("status", [404, 410])
def test_a_gone_subscription_is_forgotten_and_the_task_fails(acme: Tenant, push: WebPushStandIn, status: int) -> None:
    device, name = browser_device(acme, push)
    push.script(name, Answer(status))
    task = message_task(device)
    sender = ProviderSender()
    assert run(sender) == 1
    task.refresh_from_db()
    device.refresh_from_db()
    assert task.state == PushTask.FAILED and f"web push: {status}" in task.last_error
    assert device.push_token == "" and device.push_platform == "web"
    assert push.received(name, status)[0].payload["conversation_seq"] == 7  # it did reach the service
    assert sender.report()["web"]["failed"] == 1
    assert "127.0.0.1" not in task.last_error and "/push/" not in task.last_error  # no capability URL


def test_a_subscription_replaced_during_the_send_is_kept(acme: Tenant, push: WebPushStandIn) -> None:
    """The browser subscribed anew while the old subscription's 410 was on its way: the device
    keeps the new one."""
    device, name = browser_device(acme, push)
    push.script(name, Answer(410))
    task = message_task(device)
    now = now_ms()
    [claimed] = claim_tasks("w1", 10, now)
    assert claimed.device.push_token == device.push_token  # the worker holds the old one
    newer = canonical_subscription(push.subscribe(f"{name}-new"))
    Device.objects.filter(pk=device.pk).update(push_token=newer)
    assert send_claimed(claimed, ProviderSender(), now) == Outcome.FAILED
    device.refresh_from_db()
    task.refresh_from_db()
    assert device.push_token == newer and task.state == PushTask.FAILED
    assert len(push.received(name, 410)) == 1 and push.received(f"{name}-new", None) == []


@pytest.mark.parametrize("retry_after", ["120", "date"])
def test_a_throttled_push_is_retried_not_before_retry_after(acme: Tenant, push: WebPushStandIn, retry_after: str) -> None:
    device, name = browser_device(acme, push)
    if retry_after == "date":
        retry_after = format_datetime(datetime.now(UTC) + timedelta(seconds=125), usegmt=True)
    push.script(name, Answer(429, retry_after=retry_after))
    task = message_task(device)
    sender = ProviderSender()
    started = now_ms()
    assert run(sender, started) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts) == (PushTask.PENDING, 1) and "web push: 429" in task.last_error
    assert task.available_at_ms >= started + 118_000  # the backoff alone would say 2 s
    assert run(sender, started + 60_000) == 0  # not due before Retry-After
    assert run(sender, task.available_at_ms) == 1
    task.refresh_from_db()
    assert task.state == PushTask.SENT and len(push.wait_received(name, 1)) == 1
    assert sender.report()["web"] == {**sender.report()["web"], "sent": 1, "retried": 1, "failed": 0}


@pytest.mark.parametrize("status", [500, 503])
def test_a_server_error_is_retried(acme: Tenant, push: WebPushStandIn, status: int) -> None:
    device, name = browser_device(acme, push)
    push.script(name, Answer(status))
    task = message_task(device)
    sender = ProviderSender()
    started = now_ms()
    assert run(sender, started) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts) == (PushTask.PENDING, 1) and f"web push: {status}" in task.last_error
    assert run(sender, task.available_at_ms) == 1
    task.refresh_from_db()
    assert task.state == PushTask.SENT and task.attempts == 2
    assert [r.status for r in push.received(name, None)] == [status, 201]
    device.refresh_from_db()
    assert device.push_token  # a server error says nothing about the subscription


@pytest.mark.parametrize("status", [400, 403, 413])
def test_a_refused_request_fails_for_good_and_keeps_the_subscription(
    acme: Tenant, push: WebPushStandIn, status: int
) -> None:
    device, name = browser_device(acme, push)
    push.script(name, Answer(status, body='{"reason": "no"}'))
    task = message_task(device)
    assert run(ProviderSender()) == 1
    task.refresh_from_db()
    device.refresh_from_db()
    assert task.state == PushTask.FAILED and task.attempts == 1 and f"web push: {status}" in task.last_error
    assert device.push_token


def test_an_expired_jwt_is_renewed_within_the_send(acme: Tenant, push: WebPushStandIn) -> None:
    device, name = browser_device(acme, push)
    sender = ProviderSender()
    message_task(device, conversation_seq=1)
    assert run(sender) == 1  # caches a JWT for the stand-in's origin
    push.expire_jwt_once(name)
    task = message_task(device, conversation_seq=2)
    assert run(sender) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts) == (PushTask.SENT, 1)
    first, refused, renewed = push.received(name, None)
    assert refused.status == 403 and renewed.status == 201 and renewed.payload["conversation_seq"] == 2
    token = lambda r: r.headers["authorization"]  # noqa: E731
    assert token(first) == token(refused) != token(renewed)  # the cached JWT, then a new one
    assert sender.report()["web"] == {**sender.report()["web"], "sent": 2, "retried": 0, "failed": 0}


def test_the_jwt_is_reused_then_renewed_before_it_expires() -> None:
    clock = [1_800_000_000.0]
    cache = VapidJwtCache(clock=lambda: clock[0])
    credentials = VapidCredentials(VAPID_KEY, SUBJECT)
    first = cache.authorization(credentials, "https://push.example.net")
    clock[0] += JWT_LIFETIME_S - 3601
    assert cache.authorization(credentials, "https://push.example.net") == first
    assert cache.authorization(credentials, "https://other.example.net") != first
    clock[0] += 2
    renewed = cache.authorization(credentials, "https://push.example.net")
    assert renewed != first
    claims = json.loads(_b64(renewed.split("t=")[1].split(",")[0].split(".")[1]))
    assert claims["exp"] == int(clock[0]) + JWT_LIFETIME_S and JWT_LIFETIME_S <= 24 * 3600


def test_a_long_preview_is_cut_to_fit_the_push_service_limit(acme: Tenant, push: WebPushStandIn) -> None:
    device, name = browser_device(acme, push)
    task = message_task(device, preview="é" + "x" * 10_000)
    assert run(ProviderSender()) == 1
    [got] = push.wait_received(name, 1)
    assert got.plaintext_bytes <= MAX_PLAINTEXT_BYTES < 4096 and got.body_bytes <= MAX_BODY_BYTES
    assert got.payload["preview"].startswith("éxxx") and got.payload["preview"].endswith("…")
    assert len(got.payload["preview"]) > 3000  # shortened, not emptied
    assert got.payload["conversation_seq"] == 7
    task.refresh_from_db()
    assert task.state == PushTask.SENT


def test_an_unreachable_push_service_is_retried_without_its_url_in_the_error(acme: Tenant) -> None:
    user = do_create_user(acme, "carol", "pw")
    do_issue_token(user, "laptop")
    device = Device.objects.get(user=user, device_id="laptop")
    with running_webpush_standin() as gone:  # a port that then closes
        subscription = gone.subscribe("secret-path")
    device.push_platform, device.push_token = "web", canonical_subscription(subscription)
    device.save()
    task = message_task(device)
    assert run(ProviderSender()) == 1
    task.refresh_from_db()
    assert task.state == PushTask.PENDING and "ConnectionError talking to 127.0.0.1" in task.last_error
    assert "secret-path" not in task.last_error


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_a_subject_that_is_no_mailto_or_https_url_fails_the_push_for_good(acme: Tenant, push: WebPushStandIn) -> None:
    device, name = browser_device(acme, push)
    task = message_task(device)
    with override_settings(QIM_VAPID_SUBJECT="ops@example.com"):
        assert run(ProviderSender()) == 1
    task.refresh_from_db()
    assert task.state == PushTask.FAILED and "VAPID subject must be a mailto: or https: URL" in task.last_error
    assert push.received(name, None) == []


def test_an_https_subject_with_a_path_is_signed(acme: Tenant, push: WebPushStandIn) -> None:
    """py-vapid alone refuses it; RFC 8292 allows any https: URI."""
    device, name = browser_device(acme, push)
    message_task(device)
    with override_settings(QIM_VAPID_SUBJECT="https://ops.example.com/push-contact"):
        assert run(ProviderSender()) == 1
    assert push.wait_received(name, 1)[0].claims["sub"] == "https://ops.example.com/push-contact"


def test_a_redirect_is_not_followed(acme: Tenant, push: WebPushStandIn) -> None:
    """The allow-list vetted the endpoint, not where it points: a 307 fails the push for good."""
    device, name = browser_device(acme, push)
    trap = push.subscribe(f"{name}-trap")["endpoint"]
    push.script(name, Answer(307, location=trap))
    task = message_task(device)
    assert run(ProviderSender()) == 1
    task.refresh_from_db()
    assert task.state == PushTask.FAILED and "web push: 307" in task.last_error
    assert push.received(f"{name}-trap", None) == []


@pytest.mark.parametrize(("header", "expected"), [
    (None, None), ("120", 120.0), ("0", 0.0), ("999999", 3600.0), ("soon", None), ("-5", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date in the past: now
])
def test_retry_after_reads_seconds_and_dates(header: str | None, expected: float | None) -> None:
    assert retry_after_s(header, time.time()) == expected


def test_retry_after_reads_a_future_date() -> None:
    now = 1_800_000_000.0
    header = format_datetime(datetime.fromtimestamp(now + 90, UTC), usegmt=True)
    assert retry_after_s(header, now) == 90.0
