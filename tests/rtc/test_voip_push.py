"""An offline callee: a VoIP PushTask per device with credentials, carrying the ring deadline,
no badge change, and at most rtc_voip_push_daily_quota per device per day."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded, tenant_fixture
from tests.core.test_offline_push import badge
from tests.harness.personas import Persona, TenantHandle, api_ok
from tests.rtc.rtc_helpers import direct, new_call_id, signal

QUOTA = 2


@pytest.fixture(scope="module")
def quota_deployment(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(
        sqlite_template, work_dir, extra_env={"QIM_RTC_VOIP_PUSH_DAILY_QUOTA": str(QUOTA)}
    )
    yield deployment
    deployment.stop()


tenant = tenant_fixture("quota_deployment")


def register(persona: Persona, device_id: str, **tokens: str) -> None:
    api_ok(persona.tenant.node, "POST", f"devices/{device_id}/push", persona.token(device_id),
           json={"platform": "ios", "push_token": tokens.get("push_token", ""), **tokens})


def voip_tasks(deployment: QimDeployment, persona: Persona) -> list[tuple[str, dict]]:
    rows = deployment.db.query(
        "SELECT d.device_id, t.payload FROM qim_pushtask t JOIN qim_device d ON d.id = t.device_id "
        "JOIN qim_user u ON u.id = t.user_id WHERE u.username = ? AND t.kind = 'voip' ORDER BY t.id",
        (persona.user_id,),
    )
    return [(device, json.loads(payload)) for device, payload in rows]


async def test_an_offline_callee_gets_voip_pushes_with_the_deadline_and_no_badge_change(
    quota_deployment: QimDeployment, tenant: TenantHandle,
) -> None:
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    register(bob, "iphone", push_token="apns-1", voip_token="voip-1")
    register(bob, "android", push_token="fcm-1")
    bob.token("laptop")  # a device without credentials gets nothing
    conversation = direct(alice, bob)
    a = await alice.connect()
    badge_before = badge(quota_deployment, bob)

    call = new_call_id()
    ack = await signal(a, conversation, bob, call, "invite")
    assert (ack["state"], ack["delivered_connections"], ack["pushed"]) == ("ringing", 0, True)
    tasks = voip_tasks(quota_deployment, bob)
    assert sorted(device for device, _ in tasks) == ["android", "iphone"]
    for device, payload in tasks:
        assert payload["call_id"] == call and payload["caller_id"] == alice.user_id
        assert payload["conversation_id"] == conversation
        assert payload["ring_deadline_ms"] == ack["ring_deadline_ms"]
        assert payload["use_token"] == ("voip_token" if device == "iphone" else "push_token")
    assert badge(quota_deployment, bob) == badge_before
    assert quota_deployment.db.count(
        "qim_pushtask", "user_id = (SELECT id FROM qim_user WHERE username = ?) AND kind = 'message'",
        (bob.user_id,),
    ) == 0
    await signal(a, conversation, bob, call, "cancel")


async def test_voip_pushes_stop_at_the_daily_quota_per_device(
    quota_deployment: QimDeployment, tenant: TenantHandle,
) -> None:
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    register(bob, "iphone", push_token="apns-2", voip_token="voip-2")
    conversation = direct(alice, bob)
    a = await alice.connect()
    pushed = []
    for _ in range(QUOTA + 2):
        call = new_call_id()
        pushed.append((await signal(a, conversation, bob, call, "invite"))["pushed"])
        await signal(a, conversation, bob, call, "cancel")
    assert pushed == [True] * QUOTA + [False, False]
    assert len(voip_tasks(quota_deployment, bob)) == QUOTA
    (count,) = quota_deployment.db.query(
        "SELECT q.count FROM rtc_voippushquota q JOIN qim_device d ON d.id = q.device_id "
        "JOIN qim_user u ON u.id = d.user_id WHERE u.username = ?", (bob.user_id,),
    )[0]
    assert count == QUOTA


async def test_an_online_callee_gets_no_voip_push(quota_deployment: QimDeployment, tenant: TenantHandle) -> None:
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    register(bob, "iphone", push_token="apns-3", voip_token="voip-3")
    conversation = direct(alice, bob)
    a = await alice.connect()
    await bob.connect(device_id="desk")
    call = new_call_id()
    ack = await signal(a, conversation, bob, call, "invite")
    assert (ack["delivered_connections"], ack["pushed"]) == (1, False)
    assert voip_tasks(quota_deployment, bob) == []
    await signal(a, conversation, bob, call, "cancel")
