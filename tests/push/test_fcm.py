"""FCM HTTP v1 through the push worker, against a local FCM and OAuth2 token endpoint.

The stand-in (tests/harness/push_standins/fcm.py) speaks HTTP/2 over TLS, verifies the service
account's signed assertion and the access token, and records what a device would receive;
each test asserts on that and on the outbox rows, with the worker's own run_once and the
default ProviderSender, on a fake clock so retry times are exact.
"""

from __future__ import annotations

import json
import logging
import time
from email.utils import formatdate
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from qim.actions.accounts import do_create_user, do_issue_token
from qim.clock import now_ms
from qim.models import Device, PushTask, Tenant
from qim.push.worker import run_once
from push_providers.dispatch import ProviderSender
from push_providers.models import TenantPushConfig
from tests.harness.asgi_server import serving
from tests.harness.push_standins import fcm as standin
from tests.harness.push_standins.fcm import FcmStandIn
from tests.harness.tls import TlsFiles, make_tls_files

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000  # the worker's fake clock, in ms
BASE_MS = 2_000  # QIM_PUSH_RETRY_BASE_S
TOKEN = "fcm-registration-token-of-bobs-pixel"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("fcm-tls"))


@pytest.fixture
def fcm(tls: TlsFiles, tmp_path: Path) -> Iterator[FcmStandIn]:
    """A served stand-in, and the settings that make it the global FCM of this server."""
    app = FcmStandIn()
    with serving(app, tls=tls) as base_url:
        app.base_url = base_url
        account = tmp_path / "service-account.json"
        account.write_text(json.dumps(app.new_service_account("qim-test")))
        with override_settings(
            QIM_FCM_ENDPOINT=base_url, QIM_FCM_SERVICE_ACCOUNT_FILE=str(account), QIM_PUSH_CA_FILE=str(tls.cert)
        ):
            yield app


@pytest.fixture(autouse=True)
def no_secret_leaks(db: None, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Whatever a test does, no log line (INFO and up) and no task's last_error holds a
    registration token, an access token or the service account's private key."""
    caplog.set_level(logging.INFO)
    yield
    logged = [record.getMessage() for when in ("setup", "call") for record in caplog.get_records(when)]
    shown = "\n".join(logged + list(PushTask.objects.values_list("last_error", flat=True)))
    for secret in (TOKEN, "ya29.", "PRIVATE KEY", "Bearer"):
        assert secret not in shown


@pytest.fixture
def senders(fcm: FcmStandIn) -> Iterator[Callable[[], ProviderSender]]:
    """New ProviderSenders, whose connections close before the stand-in stops."""
    made: list[ProviderSender] = []

    def make() -> ProviderSender:
        made.append(ProviderSender())
        return made[-1]

    yield make
    for sender in made:
        sender.providers["fcm"].close()


@pytest.fixture
def pixel() -> Device:
    tenant = Tenant.objects.create(name="acme")
    bob = do_create_user(tenant, "bob", "pw")
    do_issue_token(bob, "pixel")
    device = Device.objects.get(user=bob, device_id="pixel")
    device.push_platform, device.push_token = "android", TOKEN
    device.save()
    return device


def message_task(device: Device, preview: str = "lunch at noon?", **payload: object) -> PushTask:
    return PushTask.objects.create(
        tenant=device.user.tenant, user=device.user, device=device, kind=PushTask.MESSAGE,
        payload={"conversation_id": "01CONV", "conversation_seq": 7, "sender_id": "alice",
                 "preview": preview, "badge": 3, **payload},
        available_at_ms=T0, created_at_ms=T0,
    )


def call_task(device: Device, ring_deadline_ms: int) -> PushTask:
    return PushTask.objects.create(
        tenant=device.user.tenant, user=device.user, device=device, kind=PushTask.VOIP,
        payload={"type": "rtc.invite", "call_id": "call-1", "conversation_id": "01CONV", "caller_id": "alice",
                 "ring_deadline_ms": ring_deadline_ms, "use_token": "push_token"},
        available_at_ms=T0, created_at_ms=T0,
    )


def work(sender: ProviderSender, at_ms: int = T0) -> int:
    return run_once("w1", sender, clock=lambda: at_ms)


def state(task: PushTask) -> tuple[str, int]:
    task.refresh_from_db()
    return task.state, task.attempts


def test_a_message_arrives_as_a_notification_with_its_data(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    task = message_task(pixel)
    sender = senders()
    assert work(sender) == 1
    assert state(task) == (PushTask.SENT, 1)
    [received] = fcm.received
    assert (received.project_id, received.http_version) == ("qim-test", "2")
    assert received.message == {
        "token": TOKEN,
        "notification": {"title": "alice", "body": "lunch at noon?"},
        "data": {"type": "message", "conversation_id": "01CONV", "conversation_seq": "7",
                 "sender_id": "alice", "badge": "3"},
        "android": {"priority": "normal", "collapse_key": "c:01CONV", "ttl": "86400s",
                    "notification": {"tag": "c:01CONV"}},
    }
    [claims] = fcm.token_requests  # the assertion the token endpoint verified
    assert claims["iss"] == "push@qim-test.iam.gserviceaccount.com"
    assert claims["aud"] == standin.GOOGLE_TOKEN_AUDIENCE
    assert claims["scope"] == "https://www.googleapis.com/auth/firebase.messaging"
    assert fcm.refused == []
    assert sender.report()["fcm"]["sent"] == 1


def test_a_call_is_high_priority_data_only_and_lives_until_the_ring_deadline(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    deadline = now_ms() + 30_000
    task = call_task(pixel, deadline)
    assert work(senders()) == 1
    assert state(task) == (PushTask.SENT, 1)
    [received] = fcm.received
    message = received.message
    assert set(message) == {"token", "data", "android"}  # no notification: the app rings itself
    assert message["data"] == {"type": "rtc.invite", "call_id": "call-1", "conversation_id": "01CONV",
                               "caller_id": "alice", "ring_deadline_ms": str(deadline)}
    assert message["android"]["priority"] == "high"
    ttl_s = int(message["android"]["ttl"].removesuffix("s"))
    assert 1 <= ttl_s <= 30


def test_a_call_past_its_ring_deadline_is_not_sent(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    task = call_task(pixel, now_ms() - 1)
    assert work(senders()) == 1
    assert state(task) == (PushTask.FAILED, 1)
    assert task.last_error == "PushSendError: ring deadline passed"
    assert fcm.received == [] and fcm.token_requests == []


@pytest.mark.parametrize("answer", [standin.unregistered(), standin.invalid_token()], ids=["unregistered", "invalid"])
def test_a_token_fcm_rejects_is_cleared_and_the_task_fails(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device, answer: standin.Answer) -> None:
    fcm.script(TOKEN, answer)
    task = message_task(pixel)
    sender = senders()
    assert work(sender) == 1
    assert state(task) == (PushTask.FAILED, 1)
    assert answer.body["error"]["status"] in task.last_error
    pixel.refresh_from_db()
    assert pixel.push_token == ""
    # The next task finds the device without credentials: failed, never sent.
    later = message_task(pixel)
    assert work(sender) == 1
    assert state(later) == (PushTask.FAILED, 1)
    assert fcm.received == []
    assert [status for status, _, _ in fcm.refused] == [answer.status]
    assert sender.report()["fcm"]["failed"] == 1


def test_a_token_refreshed_meanwhile_is_kept(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    """The device registered a new token while the old one was in flight: only the rejected
    one is cleared."""
    fcm.script(TOKEN, standin.unregistered())
    task = message_task(pixel)

    sender = senders()

    class Reregistering:
        def send(self, task: PushTask, device: Device) -> None:
            Device.objects.filter(pk=device.pk).update(push_token="new-token")
            sender.send(task, device)

    assert work(Reregistering()) == 1  # type: ignore[arg-type]
    assert state(task) == (PushTask.FAILED, 1)
    pixel.refresh_from_db()
    assert pixel.push_token == "new-token"


def test_throttled_429_is_retried_no_earlier_than_retry_after(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    fcm.script(TOKEN, standin.throttled(retry_after_s=120))
    task = message_task(pixel)
    sender = senders()
    assert work(sender) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts, task.available_at_ms) == (PushTask.PENDING, 1, T0 + 120_000)
    assert "429 RESOURCE_EXHAUSTED QUOTA_EXCEEDED" in task.last_error
    pixel.refresh_from_db()
    assert pixel.push_token == TOKEN
    assert work(sender, T0 + 119_999) == 0  # the backoff alone (2 s) would have retried here
    assert work(sender, T0 + 120_000) == 1
    assert state(task) == (PushTask.SENT, 2)
    assert len(fcm.received) == 1
    assert sender.report()["fcm"]["retried"] == 1 and sender.report()["fcm"]["sent"] == 1


def test_503_is_retried_with_backoff_then_sent(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    fcm.script(TOKEN, standin.unavailable(), standin.unavailable(retry_after_s=10))
    task = message_task(pixel)
    sender = senders()
    assert work(sender) == 1
    task.refresh_from_db()
    assert (task.state, task.available_at_ms) == (PushTask.PENDING, T0 + BASE_MS)  # no Retry-After: backoff
    assert work(sender, T0 + BASE_MS) == 1
    task.refresh_from_db()
    assert (task.state, task.available_at_ms) == (PushTask.PENDING, T0 + BASE_MS + 10_000)
    assert work(sender, T0 + BASE_MS + 10_000) == 1
    assert state(task) == (PushTask.SENT, 3)
    assert [r.message["token"] for r in fcm.received] == [TOKEN]
    assert [status for status, _, _ in fcm.refused] == [503, 503]


def test_a_500_with_retry_after_as_an_http_date_is_honoured(
    fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device
) -> None:
    at = formatdate(time.time() + 60, usegmt=True)  # RFC 9110 allows a date as well as seconds
    fcm.script(TOKEN, standin.fcm_error(500, "INTERNAL", "Internal error", {"@type": standin.FCM_ERROR, "errorCode": "INTERNAL"},
                                        headers=(("retry-after", at),)))
    task = message_task(pixel)
    assert work(senders()) == 1
    task.refresh_from_db()
    assert task.state == PushTask.PENDING and "FCM 500 INTERNAL" in task.last_error
    assert T0 + 50_000 <= task.available_at_ms <= T0 + 60_000


def test_an_expired_access_token_is_renewed_within_the_send(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    sender = senders()
    first = message_task(pixel, preview="one")
    assert work(sender) == 1
    assert len(fcm.token_requests) == 1
    second = message_task(pixel, preview="two")
    assert work(sender) == 1  # the cached token is reused
    assert len(fcm.token_requests) == 1

    fcm.expire_access_tokens()
    third = message_task(pixel, preview="three")
    assert work(sender) == 1
    assert [state(t) for t in (first, second, third)] == [(PushTask.SENT, 1)] * 3
    assert third.last_error == ""
    assert len(fcm.token_requests) == 2
    assert [status for status, _, _ in fcm.refused] == [401]
    assert [r.message["notification"]["body"] for r in fcm.received] == ["one", "two", "three"]
    assert sender.report()["fcm"] == {**sender.report()["fcm"], "sent": 3, "failed": 0, "retried": 0}


def test_a_long_preview_is_shortened_to_fit_fcm_s_4_kib(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    long_text = "word " * 2000  # 10,000 bytes
    task = message_task(pixel, preview=long_text)
    assert work(senders()) == 1
    assert state(task) == (PushTask.SENT, 1)
    [received] = fcm.received
    body = received.message["notification"]["body"]
    assert body.endswith("…") and long_text.startswith(body[:-1])
    assert 3000 < len(json.dumps({"message": received.message}, separators=(",", ":"), ensure_ascii=False).encode()) <= 4096
    assert fcm.refused == []


def test_another_refusal_fails_the_task_and_keeps_the_token(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    mismatch = standin.fcm_error(403, "PERMISSION_DENIED", "SenderId mismatch",
                                 {"@type": standin.FCM_ERROR, "errorCode": "SENDER_ID_MISMATCH"})
    fcm.script(TOKEN, mismatch)
    task = message_task(pixel)
    assert work(senders()) == 1
    assert state(task) == (PushTask.FAILED, 1)
    assert "403 PERMISSION_DENIED SENDER_ID_MISMATCH" in task.last_error
    pixel.refresh_from_db()
    assert pixel.push_token == TOKEN


def test_a_tenant_s_own_service_account_wins_over_the_global_one(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device) -> None:
    own = fcm.new_service_account("acme-app")
    TenantPushConfig.objects.create(tenant=pixel.user.tenant, fcm_service_account_json=json.dumps(own))
    task = message_task(pixel)
    assert work(senders()) == 1
    assert state(task) == (PushTask.SENT, 1)
    assert [r.project_id for r in fcm.received] == ["acme-app"]
    assert [c["iss"] for c in fcm.token_requests] == ["push@acme-app.iam.gserviceaccount.com"]


def test_a_refused_renewed_token_is_a_transient_failure(
    fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device
) -> None:
    """401 even with a fresh token (the account lost its FCM permission): retried later, so
    pushes resume once the operator fixes the account; the token endpoint was asked twice."""
    refused = standin.fcm_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
    fcm.script(TOKEN, refused, refused)
    task = message_task(pixel)
    assert work(senders()) == 1
    task.refresh_from_db()
    assert (task.state, task.available_at_ms) == (PushTask.PENDING, T0 + BASE_MS)
    assert "FCM 401 UNAUTHENTICATED" in task.last_error
    assert len(fcm.token_requests) == 2 and fcm.received == []


def test_an_account_the_token_endpoint_refuses_is_retried(
    fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device, tmp_path: Path
) -> None:
    """A service account whose key Google no longer knows (deleted, or a copy with another
    key): the assertion is refused, the task waits for the operator to fix the account."""
    forged = {**fcm.new_service_account("qim-test"), "private_key": fcm.new_service_account("other")["private_key"]}
    account = tmp_path / "forged.json"
    account.write_text(json.dumps(forged))
    task = message_task(pixel)
    with override_settings(QIM_FCM_SERVICE_ACCOUNT_FILE=str(account)):
        assert work(senders()) == 1
    task.refresh_from_db()
    assert task.state == PushTask.PENDING
    assert task.last_error.startswith("PushSendError: FCM OAuth2 token refused: invalid_grant")
    assert fcm.token_requests == [] and fcm.received == []
    assert [reason for _, reason, _ in fcm.refused] == ["invalid_grant"]


def test_a_refusal_about_the_message_fails_the_task_and_keeps_the_token(
    fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device
) -> None:
    fcm.script(TOKEN, standin.bad_request("message.data[0].value", "Invalid value at 'message.data[0].value'"))
    task = message_task(pixel)
    assert work(senders()) == 1
    assert state(task) == (PushTask.FAILED, 1)
    assert "400 INVALID_ARGUMENT" in task.last_error
    pixel.refresh_from_db()
    assert pixel.push_token == TOKEN


def test_a_task_whose_payload_is_not_a_message_fails_without_a_send(
    fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device
) -> None:
    task = PushTask.objects.create(tenant=pixel.user.tenant, user=pixel.user, device=pixel, payload={"n": 1},
                                   available_at_ms=T0, created_at_ms=T0)
    assert work(senders()) == 1
    assert state(task) == (PushTask.FAILED, 1)
    assert task.last_error == "PushSendError: push payload of kind 'message' lacks 'conversation_id'"
    assert fcm.received == [] and fcm.refused == []


def test_a_send_that_spent_its_time_budget_is_retried_not_sent(
    fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device
) -> None:
    """Token fetch, send, renewal and second send share one QIM_PUSH_REQUEST_TIMEOUT_S, so a
    send ends within the half lease it started in; none left means no request at all."""
    task = message_task(pixel)
    with override_settings(QIM_PUSH_REQUEST_TIMEOUT_S=0):
        assert work(senders()) == 1
    task.refresh_from_db()
    assert (task.state, task.last_error) == (
        PushTask.PENDING, "PushSendError: FCM send ran out of time (QIM_PUSH_REQUEST_TIMEOUT_S)",
    )
    assert fcm.token_requests == [] and fcm.received == []


def test_an_unreachable_fcm_is_retried(fcm: FcmStandIn, senders: Callable[[], ProviderSender], pixel: Device, tmp_path: Path) -> None:
    task = message_task(pixel)
    with override_settings(QIM_FCM_ENDPOINT="https://127.0.0.1:9"):  # nothing listens on port 9
        assert work(senders()) == 1
    task.refresh_from_db()
    assert (task.state, task.last_error) == (PushTask.PENDING, "PushSendError: FCM unreachable: ConnectError")
