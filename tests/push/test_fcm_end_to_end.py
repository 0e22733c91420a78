"""End to end: a SEND, and a call invite, over WebSocket reach an offline Android device
through a real `qim_push_worker` process and the local FCM (tests/harness/push_standins/fcm.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.asgi_server import serving
from tests.harness.personas import TenantHandle, api_ok
from tests.harness.push_standins.fcm import FcmStandIn
from tests.harness.qim_process import REPO, last_json_line, process_env
from tests.harness.tls import make_tls_files
from tests.rtc.rtc_helpers import direct, new_call_id, signal

TOKEN = "fcm-token-of-bobs-pixel"


async def run_worker(deployment: QimDeployment, tmp_path: Path) -> tuple[FcmStandIn, str]:
    """One `qim_push_worker --once` process against a fresh local FCM; its stdout."""
    tls = make_tls_files(tmp_path / "tls")
    fcm = FcmStandIn()
    with serving(fcm, tls=tls) as base_url:
        fcm.base_url = base_url
        account = tmp_path / "service-account.json"
        account.write_text(json.dumps(fcm.new_service_account("qim-e2e")))
        worker_env = {
            **deployment.env,
            "QIM_FCM_ENDPOINT": base_url,
            "QIM_FCM_SERVICE_ACCOUNT_FILE": str(account),
            "QIM_PUSH_CA_FILE": str(tls.cert),
        }
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--once"],
            env=process_env({**worker_env, "QIM_LOG_LEVEL": "INFO"}), cwd=REPO, capture_output=True, text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    # The worker's whole log at INFO: no crash, and no secret (the registration token, the
    # access token, the service account's key).
    for bad in ("Traceback", " ERROR ", "fcm-token-of", "ya29.", "PRIVATE KEY", "Bearer"):
        assert bad not in done.stderr + done.stdout, done.stderr
    return fcm, done.stdout


async def test_an_offline_android_user_gets_an_fcm_push_for_a_send(
    embedded: QimDeployment, acme: TenantHandle, tmp_path: Path
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    api_ok(acme.node, "POST", "devices/pixel/push", bob.token("pixel"), json={"platform": "android", "push_token": TOKEN})
    group = create_group(alice, bob)
    a = await alice.connect()
    ack = await send_text(a, group, "are you coming?")  # bob is offline: one PushTask

    fcm, out = await run_worker(embedded, tmp_path)
    assert last_json_line(out)["sent"] == 1
    [message] = fcm.messages_to(TOKEN)
    assert message["data"] == {
        "type": "message", "conversation_id": group, "conversation_seq": str(ack["conversation_seq"]),
        "sender_id": alice.user_id, "badge": "1",
    }
    assert message["notification"] == {"title": alice.user_id, "body": "are you coming?"}
    assert message["android"]["collapse_key"] == f"c:{group}"
    assert len(fcm.token_requests) == 1 and fcm.refused == []
    assert embedded.db.count("qim_pushtask", "state = 'sent'") == 1


async def test_an_offline_android_callee_gets_a_high_priority_call_push_until_the_ring_deadline(
    embedded: QimDeployment, acme: TenantHandle, tmp_path: Path
) -> None:
    alice, carol = acme.persona("alice"), acme.persona("carol")
    api_ok(acme.node, "POST", "devices/pixel/push", carol.token("pixel"),
           json={"platform": "android", "push_token": "fcm-token-of-carols-pixel"})
    conversation = direct(alice, carol)
    a = await alice.connect()
    call = new_call_id()
    ack = await signal(a, conversation, carol, call, "invite")
    assert (ack["state"], ack["pushed"]) == ("ringing", True)

    fcm, out = await run_worker(embedded, tmp_path)
    assert last_json_line(out)["sent"] == 1
    [message] = fcm.messages_to("fcm-token-of-carols-pixel")
    assert "notification" not in message  # data-only: the app rings itself
    assert message["data"] == {
        "type": "rtc.invite", "call_id": call, "conversation_id": conversation,
        "caller_id": alice.user_id, "ring_deadline_ms": str(ack["ring_deadline_ms"]),
    }
    assert message["android"]["priority"] == "high"
    assert 1 <= int(message["android"]["ttl"].removesuffix("s")) <= 60  # rtc_ring_timeout_s
    await signal(a, conversation, carol, call, "cancel")
