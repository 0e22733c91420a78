"""Web Push end to end: a browser subscribes over REST (the SSRF allow-list checked), goes
offline, a SEND reaches it through a real `qim_push_worker` process in forever mode, and the
Web Push stand-in (TLS, trusted through QIM_PUSH_CA_FILE) decrypts what the browser would."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from push_providers.credentials import new_vapid_key_pem, public_key_b64url
from tests.conftest import QimDeployment, start_embedded, tenant_fixture
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import Persona, api, api_ok
from tests.harness.push_standins.webpush import WebPushStandIn, running_webpush_standin
from tests.harness.qim_process import REPO, process_env
from tests.harness.tls import make_tls_files
from tests.rtc import rtc_helpers

VAPID_KEY = new_vapid_key_pem()
SUBJECT = "https://ops.example.com/contact"


def raw_scalar_b64url(pem: str) -> str:
    """The key as QIM_VAPID_PRIVATE_KEY's other form: base64url of the 32-byte scalar."""
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    return base64.urlsafe_b64encode(key.private_numbers().private_value.to_bytes(32, "big")).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def push(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebPushStandIn]:
    tls = make_tls_files(tmp_path_factory.mktemp("webpush-tls"))
    with running_webpush_standin(tls) as standin:
        standin.tls = tls  # type: ignore[attr-defined]
        yield standin


@pytest.fixture(scope="module")
def webpush_node(sqlite_template: Path, work_dir: Path, push: WebPushStandIn) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_VAPID_PRIVATE_KEY": raw_scalar_b64url(VAPID_KEY),
        "QIM_VAPID_SUBJECT": SUBJECT,
        "QIM_WEB_PUSH_ENDPOINT_HOSTS": "127.0.0.1,*.push.example.net",
        "QIM_PUSH_CA_FILE": str(push.tls.cert),  # type: ignore[attr-defined]
    })
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def worker(webpush_node: QimDeployment) -> Iterator[subprocess.Popen[str]]:
    """One `qim_push_worker` in forever mode for the module; it must stop cleanly."""
    process = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--idle-sleep", "0.05"],
        env=process_env(webpush_node.env), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
    assert json.loads(stdout.strip().splitlines()[-1])["failed"] == 0


acme = tenant_fixture("webpush_node")


async def pushed(push: WebPushStandIn, name: str, deployment: QimDeployment) -> list:
    """The pushes the stand-in decrypted for `name`; on a timeout, the outbox's rows say why."""
    try:
        return await asyncio.to_thread(push.wait_received, name, 1, timeout_s=60)
    except AssertionError as exc:
        rows = deployment.db.query("SELECT id, kind, state, attempts, last_error FROM qim_pushtask ORDER BY id")
        raise AssertionError(f"{exc}; outbox: {rows}") from None


def subscribe(persona: Persona, device_id: str, subscription: dict) -> object:
    return api(persona.tenant.node, "POST", f"devices/{device_id}/push", persona.token(device_id),
               json={"platform": "web", "subscription": subscription})


def keys() -> dict[str, str]:
    point = b"\x04" + bytes(range(64))
    return {"p256dh": base64.urlsafe_b64encode(point).rstrip(b"=").decode(), "auth": "AAAAAAAAAAAAAAAAAAAAAA"}


@pytest.mark.parametrize("endpoint", [
    "http://127.0.0.1:9/push/x",                  # plain http, QIM_WEB_PUSH_ALLOW_HTTP is off
    "https://10.0.0.7/push/x",                    # a host outside the list
    "https://push.example.net/x",                 # `*.` matches subdomains, not the domain
    "https://evil.com/?https://a.push.example.net/",
    "https://a.push.example.net@evil.com/x",      # userinfo
    "file:///etc/passwd",
    "https://127.0.0.1\t/push/x",                # urlsplit drops the tab; urllib3 would refuse it
    "https://10.0.0.7\\.a.push.example.net/x",     # urllib3 would connect to 10.0.0.7
])
async def test_subscriptions_outside_the_allow_list_are_refused(acme, endpoint: str) -> None:  # type: ignore[no-untyped-def]
    bob = acme.persona("bob")
    answer = subscribe(bob, "laptop", {"endpoint": endpoint, "keys": keys()})
    assert answer.status_code == 400 and answer.json()["code"] == "bad_request", answer.text
    assert set(answer.json()) >= {"code", "message"}


async def test_allowed_subscriptions_are_accepted(acme, push: WebPushStandIn) -> None:  # type: ignore[no-untyped-def]
    bob = acme.persona("bob")
    wildcard = subscribe(bob, "laptop", {"endpoint": "https://fcm.a.push.example.net/send/abc", "keys": keys()})
    assert wildcard.status_code == 200 and wildcard.json() == {"device_id": "laptop", "platform": "web"}
    standin = subscribe(bob, "desktop", push.subscribe("accepted"))
    assert standin.status_code == 200
    missing = api(acme.node, "POST", "devices/laptop/push", bob.token("laptop"), json={"platform": "web"})
    assert missing.status_code == 400 and missing.json()["code"] == "bad_request"


async def test_the_vapid_public_key_is_the_servers(acme) -> None:  # type: ignore[no-untyped-def]
    answer = api_ok(acme.node, "GET", "push/vapid-public-key", acme.persona("bob").token())
    assert answer == {"public_key": public_key_b64url(VAPID_KEY)}
    assert api(acme.node, "GET", "push/vapid-public-key").status_code == 401


async def test_a_send_to_an_offline_browser_arrives_decrypted(acme, push: WebPushStandIn, worker, webpush_node: QimDeployment) -> None:  # type: ignore[no-untyped-def]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    assert subscribe(bob, "laptop", push.subscribe(f"{bob.user_id}-laptop")).status_code == 200
    group = create_group(alice, bob)
    a = await alice.connect()
    ack = await send_text(a, group, "are you there?")

    [got] = await pushed(push, f"{bob.user_id}-laptop", webpush_node)
    assert got.payload["type"] == "message"
    assert str(got.payload["conversation_id"]) == str(group)
    assert got.payload["conversation_seq"] == ack["conversation_seq"]
    assert got.payload["sender_id"] == alice.user_id and got.payload["preview"] == "are you there?"
    assert got.payload["badge"] == 1
    k = got.headers["authorization"].split("k=")[1]
    assert k == public_key_b64url(VAPID_KEY) and got.claims["sub"] == SUBJECT
    assert push.refusals == []


async def test_an_e2ee_conversation_pushes_only_the_placeholder(acme, push: WebPushStandIn, worker, webpush_node: QimDeployment) -> None:  # type: ignore[no-untyped-def]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    assert subscribe(bob, "laptop", push.subscribe(f"{bob.user_id}-e2ee")).status_code == 200
    group = api_ok(acme.node, "POST", "conversations", alice.token(), json={
        "kind": "group", "title": "secret", "member_user_ids": [bob.user_id], "e2ee": True,
    })["conversation_id"]
    a = await alice.connect()
    ack = await send_text(a, group, "ciphertext-ish")
    [got] = await pushed(push, f"{bob.user_id}-e2ee", webpush_node)
    assert got.payload["preview"] == "[message]" and got.payload["conversation_seq"] == ack["conversation_seq"]
    assert "ciphertext" not in json.dumps(got.payload)



async def test_a_call_to_an_offline_browser_rings_with_the_deadline(  # type: ignore[no-untyped-def]
    acme, push: WebPushStandIn, worker, webpush_node: QimDeployment
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    assert subscribe(bob, "laptop", push.subscribe(f"{bob.user_id}-call")).status_code == 200
    conversation = rtc_helpers.direct(alice, bob)
    a = await alice.connect()
    call = rtc_helpers.new_call_id()
    invited_ms = time.time() * 1000
    ack = await rtc_helpers.signal(a, conversation, bob, call, "invite")
    assert ack["pushed"] is True
    [got] = await pushed(push, f"{bob.user_id}-call", webpush_node)
    assert got.payload == {
        "type": "rtc.invite", "call_id": call, "conversation_id": conversation, "caller_id": alice.user_id,
        "ring_deadline_ms": ack["ring_deadline_ms"],
    }
    assert got.headers["urgency"] == "high" and "topic" not in got.headers
    # The TTL is the time left to the deadline when the worker sent it: at most that at the invite.
    assert 0 < int(got.headers["ttl"]) <= (ack["ring_deadline_ms"] - invited_ms) / 1000 + 1
    await rtc_helpers.signal(a, conversation, bob, call, "cancel")
