"""APNs: what Apple would see of each push, and what each of its answers does to the outbox.

Pushes go through the worker's send_claimed and the default ProviderSender to a local APNs
stand-in (tests/harness/push_standins/apns.py) over HTTP/2 over TLS, which checks the ES256
provider JWT, the headers and the payload as Apple does.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

from qim.actions.accounts import do_create_user, do_issue_token
from qim.clock import now_ms
from qim.models import Device, PushTask, Tenant
from qim.push.worker import Outcome, claim_tasks, send_claimed
from push_providers.apns import ProviderTokens, TOKEN_RENEW_AFTER_S, endpoint_for
from push_providers.retry_after import retry_after_s
from push_providers.credentials import ApnsCredentials
from push_providers.dispatch import ProviderSender
from push_providers.models import TenantPushConfig
from tests.harness.asgi_server import serving
from tests.harness.push_standins.apns import Answer, ApnsStandIn, new_signing_key
from tests.harness.services import free_port
from tests.harness.tls import make_tls_files

pytestmark = pytest.mark.django_db

KEY_ID, TEAM_ID, BUNDLE = "KEY1234567", "TEAM123456", "com.example.qim"
CONVERSATION = "c-0123456789"


@pytest.fixture(scope="module")
def apns_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The .p8 key file and its public key PEM."""
    private, public = new_signing_key()
    path = tmp_path_factory.mktemp("apns") / "AuthKey_KEY1234567.p8"
    path.write_text(private)
    return path, public


@pytest.fixture(scope="module")
def standin_url(apns_key: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApnsStandIn, str, Path]]:
    standin = ApnsStandIn(apns_key[1], KEY_ID, TEAM_ID, BUNDLE)
    tls = make_tls_files(tmp_path_factory.mktemp("apns-tls"))
    with serving(standin, tls=tls) as url:
        yield standin, url, tls.cert


@pytest.fixture
def apns(standin_url: tuple[ApnsStandIn, str, Path], apns_key: tuple[Path, str], settings) -> ApnsStandIn:  # type: ignore[no-untyped-def]
    """The stand-in, cleared, with the global APNs credentials pointing at it."""
    standin, url, ca_file = standin_url
    standin.seen.clear()
    standin.script.clear()
    settings.QIM_APNS_KEY_FILE, settings.QIM_APNS_KEY_ID = str(apns_key[0]), KEY_ID
    settings.QIM_APNS_TEAM_ID, settings.QIM_APNS_BUNDLE_ID = TEAM_ID, BUNDLE
    settings.QIM_APNS_ENDPOINT, settings.QIM_PUSH_CA_FILE = url, str(ca_file)
    return standin


@pytest.fixture
def sender() -> Iterator[ProviderSender]:
    provider_sender = ProviderSender()
    yield provider_sender
    provider_sender.providers["apns"].close()


@pytest.fixture
def phone() -> Device:
    """Bob's iPhone: an alert token and a PushKit VoIP token, as Apple's hex strings."""
    bob = do_create_user(Tenant.objects.create(name="acme"), "bob", "pw")
    do_issue_token(bob, "iphone")
    device = Device.objects.get(user=bob, device_id="iphone")
    device.push_platform, device.push_token, device.voip_token = "ios", secrets.token_hex(32), secrets.token_hex(32)
    device.save()
    return device


def message_task(device: Device, preview: str = "see you at 6", **payload: object) -> PushTask:
    fields = {"conversation_id": CONVERSATION, "conversation_seq": 42, "sender_id": "alice", "preview": preview, "badge": 3}
    return _task(device, PushTask.MESSAGE, {**fields, **payload})


def call_task(device: Device, ring_deadline_ms: int, use_token: str = "voip_token") -> PushTask:
    payload = {"type": "rtc.invite", "call_id": "call-1", "conversation_id": CONVERSATION, "caller_id": "alice",
               "ring_deadline_ms": ring_deadline_ms, "use_token": use_token}
    return _task(device, PushTask.VOIP, payload)


def _task(device: Device, kind: str, payload: dict) -> PushTask:
    now = now_ms()
    return PushTask.objects.create(tenant=device.user.tenant, user=device.user, device=device, kind=kind,
                                   payload=payload, available_at_ms=now, created_at_ms=now)


def run(task: PushTask, sender: ProviderSender, at_ms: int | None = None) -> tuple[Outcome, PushTask]:
    """Claim `task` and send it as the worker does; answers the outcome and the task after."""
    at_ms = at_ms if at_ms is not None else now_ms()
    [claimed] = [t for t in claim_tasks("w1", 10, at_ms) if t.id == task.id]
    outcome = send_claimed(claimed, sender, at_ms)
    task.refresh_from_db()
    return outcome, task


def test_a_message_is_an_alert_to_the_push_token_over_http2(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    before_s = now_ms() // 1000
    outcome, task = run(message_task(phone), sender)
    assert (outcome, task.state, task.attempts) == (Outcome.SENT, PushTask.SENT, 1)
    [push] = apns.seen
    assert (push.status, push.http_version, push.token) == (200, "2", phone.push_token)
    assert {k: push.headers[k] for k in ("apns-push-type", "apns-topic", "apns-priority", "apns-collapse-id")} == {
        "apns-push-type": "alert", "apns-topic": BUNDLE, "apns-priority": "10", "apns-collapse-id": f"c:{CONVERSATION}",
    }
    assert before_s + 24 * 3600 <= int(push.headers["apns-expiration"]) <= now_ms() // 1000 + 24 * 3600
    assert push.payload == {
        "aps": {"alert": {"title": "alice", "body": "see you at 6"}, "badge": 3, "sound": "default",
                "thread-id": CONVERSATION},
        "qim": {"type": "message", "conversation_id": CONVERSATION, "conversation_seq": 42, "sender_id": "alice"},
    }
    assert sender.report()["apns"]["sent"] == 1


def test_pushes_share_one_http2_connection_and_one_provider_token(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    for _ in range(3):
        assert run(message_task(phone), sender)[0] is Outcome.SENT
    assert len({push.client for push in apns.accepted}) == 1
    assert len({push.provider_token for push in apns.accepted}) == 1
    header = jwt.get_unverified_header(apns.accepted[0].provider_token)
    assert (header["alg"], header["kid"]) == ("ES256", KEY_ID)


def test_a_call_is_a_voip_push_to_the_voip_token_until_the_ring_deadline(
    apns: ApnsStandIn, sender: ProviderSender, phone: Device,
) -> None:
    deadline = now_ms() + 60_000
    outcome, _ = run(call_task(phone, deadline), sender)
    assert outcome is Outcome.SENT
    [push] = apns.seen
    assert (push.status, push.http_version, push.token) == (200, "2", phone.voip_token)
    assert (push.headers["apns-push-type"], push.headers["apns-topic"], push.headers["apns-priority"]) == (
        "voip", f"{BUNDLE}.voip", "10",
    )
    assert push.headers["apns-expiration"] == str(deadline // 1000)
    assert push.payload == {"qim": {"type": "rtc.invite", "call_id": "call-1", "conversation_id": CONVERSATION,
                                    "caller_id": "alice", "ring_deadline_ms": deadline}}


def test_a_call_to_a_device_without_a_voip_token_is_a_time_sensitive_alert(
    apns: ApnsStandIn, sender: ProviderSender, phone: Device,
) -> None:
    Device.objects.filter(pk=phone.pk).update(voip_token="")
    deadline = now_ms() + 60_000
    assert run(call_task(phone, deadline, use_token="push_token"), sender)[0] is Outcome.SENT
    [push] = apns.seen
    assert (push.token, push.headers["apns-push-type"], push.headers["apns-topic"]) == (phone.push_token, "alert", BUNDLE)
    assert (push.headers["apns-expiration"], push.headers["apns-collapse-id"]) == (str(deadline // 1000), "call:call-1")
    assert push.payload["aps"]["interruption-level"] == "time-sensitive"
    assert push.payload["qim"]["ring_deadline_ms"] == deadline


def test_a_call_past_its_ring_deadline_is_not_sent(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    outcome, task = run(call_task(phone, now_ms() - 1), sender)
    assert (outcome, task.state, task.last_error) == (Outcome.FAILED, PushTask.FAILED, "PushSendError: ring deadline passed")
    assert apns.seen == []


@pytest.mark.parametrize("status, reason", [(410, "Unregistered"), (400, "DeviceTokenNotForTopic")])
def test_a_token_apple_rejects_is_cleared_and_the_task_fails(
    apns: ApnsStandIn, sender: ProviderSender, phone: Device, status: int, reason: str,
) -> None:
    apns.answer(phone.push_token, Answer(status, reason))
    outcome, task = run(message_task(phone), sender)
    assert (outcome, task.state, task.attempts) == (Outcome.FAILED, PushTask.FAILED, 1)
    assert task.last_error == f"PushSendError: APNs {status} {reason}"
    phone_after = Device.objects.get(pk=phone.pk)
    assert (phone_after.push_token, phone_after.voip_token) == ("", phone.voip_token)
    assert sender.report()["apns"]["failed"] == 1


def test_a_malformed_token_is_a_bad_device_token_and_is_cleared(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    Device.objects.filter(pk=phone.pk).update(voip_token="not-a-pushkit-token")
    outcome, task = run(call_task(phone, now_ms() + 60_000), sender)
    assert (outcome, task.last_error) == (Outcome.FAILED, "PushSendError: APNs 400 BadDeviceToken")
    assert [s.status for s in apns.seen] == [400]
    phone_after = Device.objects.get(pk=phone.pk)
    assert (phone_after.voip_token, phone_after.push_token) == ("", phone.push_token)


def test_throttled_429_is_retried_no_earlier_than_retry_after(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    apns.answer(phone.push_token, Answer(429, "TooManyRequests", retry_after="120"))
    task = message_task(phone)  # due at its creation: before `started`
    started = now_ms()
    outcome, task = run(task, sender, at_ms=started)
    assert (outcome, task.state, task.attempts) == (Outcome.RETRIED, PushTask.PENDING, 1)
    assert task.available_at_ms >= started + 120_000
    assert task.last_error == "PushSendError: APNs 429 TooManyRequests"
    assert Device.objects.get(pk=phone.pk).push_token == phone.push_token
    assert claim_tasks("w1", 10, started + 119_000) == []
    outcome, task = run(task, sender, at_ms=task.available_at_ms)
    assert (outcome, task.state, task.attempts) == (Outcome.SENT, PushTask.SENT, 2)
    assert sender.report()["apns"] | {"latency_ms_mean": 0, "latency_ms_max": 0} == {
        "sent": 1, "failed": 0, "retried": 1, "latency_ms_mean": 0, "latency_ms_max": 0,
    }


@pytest.mark.parametrize("status, reason", [(500, "InternalServerError"), (503, "ServiceUnavailable")])
def test_a_server_error_is_retried_with_backoff(
    apns: ApnsStandIn, sender: ProviderSender, phone: Device, status: int, reason: str,
) -> None:
    apns.answer(phone.push_token, Answer(status, reason))
    task = message_task(phone)  # due at its creation: before `started`
    started = now_ms()
    outcome, task = run(task, sender, at_ms=started)
    assert (outcome, task.state, task.last_error) == (Outcome.RETRIED, PushTask.PENDING, f"PushSendError: APNs {status} {reason}")
    assert task.available_at_ms > started
    outcome, task = run(task, sender, at_ms=task.available_at_ms)
    assert (outcome, task.attempts) == (Outcome.SENT, 2)
    assert [s.status for s in apns.seen] == [status, 200]


def test_an_expired_provider_token_is_renewed_within_the_send(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    apns.answer(phone.push_token, Answer(403, "ExpiredProviderToken"))
    outcome, task = run(message_task(phone), sender)
    assert (outcome, task.state, task.attempts, task.last_error) == (Outcome.SENT, PushTask.SENT, 1, "")
    first, second = apns.seen
    assert (first.status, second.status) == (403, 200)
    assert first.provider_token != second.provider_token
    assert (sender.report()["apns"]["sent"], sender.report()["apns"]["retried"]) == (1, 0)


def test_the_provider_token_is_reused_then_renewed_after_50_minutes(
    apns: ApnsStandIn, sender: ProviderSender, phone: Device,
) -> None:
    """Apple refuses a JWT past an hour (the stand-in too) and throttles renewals."""
    now = {"s": now_ms() / 1000 - 55 * 60}
    sender.providers["apns"].tokens = ProviderTokens(clock=lambda: now["s"])
    run(message_task(phone), sender)
    now["s"] += 4 * 60
    run(message_task(phone), sender)
    now["s"] += 51 * 60
    run(message_task(phone), sender)
    tokens = [push.provider_token for push in apns.seen]
    assert [push.status for push in apns.seen] == [200, 200, 200]
    assert tokens[0] == tokens[1] != tokens[2]
    issued = [jwt.decode(t, options={"verify_signature": False})["iat"] for t in tokens]
    assert issued[2] - issued[0] == 55 * 60


def test_a_long_preview_is_shortened_under_4_kib(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    preview = "é" * 5000  # 10 000 bytes of UTF-8
    assert run(message_task(phone, preview=preview), sender)[0] is Outcome.SENT
    [push] = apns.seen
    body = push.payload["aps"]["alert"]["body"]
    assert body.endswith("…") and preview.startswith(body[:-1]) and len(body) > 1000
    assert len(json.dumps(push.payload, separators=(",", ":"), ensure_ascii=False).encode()) <= 4096


@pytest.mark.parametrize("setting, value, status, reason", [
    ("QIM_APNS_BUNDLE_ID", "com.example.other", 400, "BadTopic"),
    ("QIM_APNS_KEY_ID", "WRONGKEY00", 403, "InvalidProviderToken"),
])
def test_other_refusals_fail_the_task_and_keep_the_token(  # type: ignore[no-untyped-def]
    apns: ApnsStandIn, sender: ProviderSender, phone: Device, settings, setting: str, value: str, status: int, reason: str,
) -> None:
    setattr(settings, setting, value)
    outcome, task = run(message_task(phone), sender)
    assert (outcome, task.state, task.last_error) == (Outcome.FAILED, PushTask.FAILED, f"PushSendError: APNs {status} {reason}")
    assert Device.objects.get(pk=phone.pk).push_token == phone.push_token


def test_the_endpoint_is_apples_host_for_the_environment_unless_set(settings) -> None:  # type: ignore[no-untyped-def]
    settings.QIM_APNS_ENDPOINT = ""
    production = ApnsCredentials("pem", KEY_ID, TEAM_ID, BUNDLE, "production")
    sandbox = ApnsCredentials("pem", KEY_ID, TEAM_ID, BUNDLE, "sandbox")
    assert endpoint_for(production) == "https://api.push.apple.com"
    assert endpoint_for(sandbox) == "https://api.sandbox.push.apple.com"
    settings.QIM_APNS_ENDPOINT = "https://127.0.0.1:8443/"
    assert endpoint_for(sandbox) == "https://127.0.0.1:8443"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_s("30", 0.0) == 30.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480.0 - 90) == 90.0
    assert retry_after_s("soon", 0.0) is None and retry_after_s(None, 0.0) is None


def test_renewal_waits_50_minutes() -> None:
    private, _ = new_signing_key()
    credentials = ApnsCredentials(private, KEY_ID, TEAM_ID, BUNDLE, "production")
    now = {"s": 1_700_000_000.0}
    tokens = ProviderTokens(clock=lambda: now["s"])
    first = tokens.get(credentials)
    now["s"] += TOKEN_RENEW_AFTER_S - 1
    assert tokens.get(credentials) == first
    now["s"] += 1
    renewed = tokens.get(credentials)
    assert renewed != first
    assert jwt.decode(renewed, options={"verify_signature": False}) == {"iss": TEAM_ID, "iat": int(now["s"])}


def test_a_tenants_own_credentials_win_over_the_global_ones(  # type: ignore[no-untyped-def]
    apns: ApnsStandIn, sender: ProviderSender, phone: Device, apns_key: tuple[Path, str], settings,
) -> None:
    settings.QIM_APNS_BUNDLE_ID = "com.example.someone-else"  # the global topic would be refused
    TenantPushConfig.objects.create(
        tenant=phone.user.tenant, apns_key_pem=apns_key[0].read_text(), apns_key_id=KEY_ID,
        apns_team_id=TEAM_ID, apns_bundle_id=BUNDLE, apns_environment="sandbox",
    )
    assert run(message_task(phone), sender)[0] is Outcome.SENT
    assert apns.seen[0].headers["apns-topic"] == BUNDLE


def test_an_unreachable_apns_is_a_transient_failure(apns: ApnsStandIn, sender: ProviderSender, phone: Device, settings) -> None:  # type: ignore[no-untyped-def]
    settings.QIM_APNS_ENDPOINT = f"https://127.0.0.1:{free_port()}"
    outcome, task = run(message_task(phone), sender)
    assert (outcome, task.state) == (Outcome.RETRIED, PushTask.PENDING)
    assert task.last_error.startswith("ConnectError: ")
    assert phone.push_token not in task.last_error
    assert Device.objects.get(pk=phone.pk).push_token == phone.push_token


def test_a_request_apns_does_not_answer_in_time_is_given_up_and_retried(  # type: ignore[no-untyped-def]
    apns: ApnsStandIn, sender: ProviderSender, phone: Device, settings,
) -> None:
    """The send must end within half the claim lease; QIM_PUSH_REQUEST_TIMEOUT_S bounds it."""
    settings.QIM_PUSH_REQUEST_TIMEOUT_S = 0.5
    apns.answer(phone.push_token, Answer(200, stall_s=3.0))
    outcome, task = run(message_task(phone), sender)
    assert (outcome, task.state) == (Outcome.RETRIED, PushTask.PENDING)
    assert task.last_error.startswith("ReadTimeout")


def test_a_call_goes_to_the_voip_token_the_device_holds_at_send_time(
    apns: ApnsStandIn, sender: ProviderSender, phone: Device,
) -> None:
    """Queued when the device had no PushKit token (use_token push_token); it has one now."""
    assert run(call_task(phone, now_ms() + 60_000, use_token="push_token"), sender)[0] is Outcome.SENT
    [push] = apns.seen
    assert (push.token, push.headers["apns-push-type"]) == (phone.voip_token, "voip")


def test_a_token_with_path_characters_stays_one_device_token(apns: ApnsStandIn, sender: ProviderSender, phone: Device) -> None:
    """A client registers any string; it must not steer the request to another device."""
    other = secrets.token_hex(32)
    hostile = f"../../3/device/{other}?x=1"
    Device.objects.filter(pk=phone.pk).update(push_token=hostile)
    outcome, task = run(message_task(phone), sender)
    assert (outcome, task.last_error) == (Outcome.FAILED, "PushSendError: APNs 400 BadDeviceToken")
    assert [(s.token, s.status) for s in apns.seen] == [(hostile, 400)]
    assert Device.objects.get(pk=phone.pk).push_token == ""
