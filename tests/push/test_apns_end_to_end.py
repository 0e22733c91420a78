"""End to end through APNs: a daphne node, real clients, a real `qim_push_worker` process
pointed at the local APNs stand-in by environment, and what reaches the stand-in."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded, tenant_fixture
from tests.core.conversation_helpers import send_text
from tests.harness.asgi_server import serving
from tests.harness.personas import Persona, TenantHandle, api_ok
from tests.harness.push_standins.apns import ApnsStandIn, Seen, new_signing_key
from tests.harness.qim_process import REPO, last_json_line, process_env
from tests.harness.tls import make_tls_files
from tests.harness.traffic import wait_until
from tests.rtc.rtc_helpers import direct, new_call_id, signal

KEY_ID, TEAM_ID, BUNDLE = "KEYE2E0001", "TEAME2E001", "com.example.qim.e2e"


@pytest.fixture(scope="module")
def apns_standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApnsStandIn, dict[str, str]]]:
    """The stand-in, and the environment that points QIM at it with the test key."""
    directory = tmp_path_factory.mktemp("apns-e2e")
    private, public = new_signing_key()
    key_file = directory / f"AuthKey_{KEY_ID}.p8"
    key_file.write_text(private)
    standin = ApnsStandIn(public, KEY_ID, TEAM_ID, BUNDLE)
    tls = make_tls_files(directory)
    with serving(standin, tls=tls) as url:
        yield standin, {
            "QIM_APNS_KEY_FILE": str(key_file), "QIM_APNS_KEY_ID": KEY_ID, "QIM_APNS_TEAM_ID": TEAM_ID,
            "QIM_APNS_BUNDLE_ID": BUNDLE, "QIM_APNS_ENVIRONMENT": "sandbox", "QIM_APNS_ENDPOINT": url,
            "QIM_PUSH_CA_FILE": str(tls.cert),
        }


@pytest.fixture(scope="module")
def apns_deployment(
    sqlite_template: Path, work_dir: Path, apns_standin: tuple[ApnsStandIn, dict[str, str]],
) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=apns_standin[1])
    yield deployment
    deployment.stop()


tenant = tenant_fixture("apns_deployment")


def register_iphone(persona: Persona, device_id: str) -> tuple[str, str]:
    """An offline iPhone with an alert token and a PushKit token; answers both."""
    push_token, voip_token = secrets.token_hex(32), secrets.token_hex(32)
    api_ok(persona.tenant.node, "POST", f"devices/{device_id}/push", persona.token(device_id),
           json={"platform": "ios", "push_token": push_token, "voip_token": voip_token})
    return push_token, voip_token


def run_worker(deployment: QimDeployment) -> tuple[dict, str]:
    """`manage.py qim_push_worker --once` with the deployment's environment, logging at
    DEBUG: its report and its whole output (to look for secrets in)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--once"],
        env=process_env({**deployment.env, "QIM_LOG_LEVEL": "DEBUG"}), cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return last_json_line(done.stdout), done.stdout + done.stderr


def assert_not_logged(log: str, *secrets_: str) -> None:
    """Device tokens and the provider JWT are credentials: never in a log line."""
    assert [s for s in secrets_ if s in log] == [], "a secret was logged"


def pending_tasks(deployment: QimDeployment, persona: Persona, kind: str) -> int:
    return deployment.db.count(
        "qim_pushtask", "state = 'pending' AND kind = ? AND user_id = (SELECT id FROM qim_user WHERE username = ?)",
        (kind, persona.user_id),
    )


def pushes_to(standin: ApnsStandIn, token: str) -> list[Seen]:
    return [push for push in standin.accepted if push.token == token]


async def test_an_rtc_invite_to_an_offline_iphone_rings_it_by_voip_push(
    apns_deployment: QimDeployment, apns_standin: tuple[ApnsStandIn, dict[str, str]], tenant: TenantHandle,
) -> None:
    standin = apns_standin[0]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    push_token, voip_token = register_iphone(bob, "iphone")
    conversation = direct(alice, bob)
    a = await alice.connect()
    call = new_call_id()
    ack = await signal(a, conversation, bob, call, "invite")
    assert (ack["delivered_connections"], ack["pushed"]) == (0, True)
    await wait_until(lambda: pending_tasks(apns_deployment, bob, "voip") == 1, 30, "a voip task queued")

    report, log = run_worker(apns_deployment)
    assert {k: report[k] for k in ("sent", "failed", "retried")} == {"sent": 1, "failed": 0, "retried": 0}
    assert report["providers"]["apns"]["sent"] == 1
    [push] = pushes_to(standin, voip_token)
    assert_not_logged(log, push_token, voip_token, push.provider_token)
    assert (push.http_version, push.headers["apns-push-type"], push.headers["apns-topic"]) == ("2", "voip", f"{BUNDLE}.voip")
    assert push.headers["apns-priority"] == "10"
    assert push.headers["apns-expiration"] == str(ack["ring_deadline_ms"] // 1000)
    assert push.payload == {"qim": {"type": "rtc.invite", "call_id": call, "conversation_id": conversation,
                                    "caller_id": alice.user_id, "ring_deadline_ms": ack["ring_deadline_ms"]}}
    await signal(a, conversation, bob, call, "cancel")


async def test_a_message_to_an_offline_iphone_is_an_alert_with_its_position(
    apns_deployment: QimDeployment, apns_standin: tuple[ApnsStandIn, dict[str, str]], tenant: TenantHandle,
) -> None:
    standin = apns_standin[0]
    alice, carol = tenant.persona("alice"), tenant.persona("carol")
    push_token, voip_token = register_iphone(carol, "iphone")
    conversation = direct(alice, carol)
    a = await alice.connect()
    ack = await send_text(a, conversation, "lunch at noon?")
    await wait_until(lambda: pending_tasks(apns_deployment, carol, "message") == 1, 30, "a message task queued")

    report, log = run_worker(apns_deployment)  # earlier tests' leftovers (a missed-call record) go too
    assert (report["failed"], report["retried"]) == (0, 0) and report["sent"] >= 1
    [push] = pushes_to(standin, push_token)
    assert_not_logged(log, push_token, voip_token, push.provider_token)
    assert (push.headers["apns-push-type"], push.headers["apns-topic"]) == ("alert", BUNDLE)
    assert push.headers["apns-collapse-id"] == f"c:{conversation}"
    assert push.payload["qim"] == {"type": "message", "conversation_id": conversation,
                                   "conversation_seq": ack["conversation_seq"], "sender_id": alice.user_id}
    assert push.payload["aps"]["alert"] == {"title": alice.user_id, "body": "lunch at noon?"}
    assert push.payload["aps"]["badge"] == 1
