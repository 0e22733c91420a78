"""Who may signal whom, and refused frames: tenants, membership, types, sizes, rates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment, start_embedded
from tests.core.conversation_helpers import create_group
from tests.harness.personas import TenantHandle
from tests.rtc.rtc_helpers import direct, new_call_id, next_signal, rtc_pushes, signal

MAX_PAYLOAD = 4096  # the built-in types are created with 4096: no lower
RATE = 3


@pytest.fixture(scope="module")
def small_limits(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(
        sqlite_template, work_dir,
        extra_env={"QIM_MAX_CUSTOM_PAYLOAD_BYTES": str(MAX_PAYLOAD), "QIM_PER_USER_MSG_RATE": str(RATE)},
    )
    yield deployment
    deployment.stop()


@pytest.fixture
async def tenants(small_limits: QimDeployment) -> AsyncIterator[tuple[TenantHandle, TenantHandle]]:
    acme, globex = small_limits.tenants["acme"], small_limits.tenants["globex"]
    yield acme, globex
    await acme.close_clients()
    await globex.close_clients()


async def refusal(coroutine) -> QimError:  # type: ignore[no-untyped-def]
    with pytest.raises(QimError) as refused:
        await coroutine
    return refused.value


async def test_another_tenants_conversation_is_not_found_and_non_members_are_forbidden(
    tenants: tuple[TenantHandle, TenantHandle],
) -> None:
    acme, globex = tenants
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    mallory = globex.persona("mallory")
    group = create_group(alice, bob)
    foreign = direct(mallory, globex.persona("trent"))
    a, c = await alice.connect(), await carol.connect()
    b = await bob.connect()
    m = await mallory.connect()

    assert (await refusal(signal(m, group, bob, new_call_id(), "invite"))).code == "not_found"
    assert (await refusal(signal(a, foreign, mallory, new_call_id(), "invite"))).code == "not_found"
    assert (await refusal(signal(c, group, bob, new_call_id(), "invite"))).code == "forbidden"
    assert (await refusal(signal(a, group, dave, new_call_id(), "invite"))).code == "forbidden"

    call = new_call_id()
    await signal(a, group, bob, call, "invite")
    await next_signal(b)
    # Someone who is not a party, even a member, cannot act on the call.
    assert (await refusal(signal(c, group, bob, call, "hangup"))).code == "forbidden"
    assert (await refusal(signal(m, group, bob, call, "sdp"))).code == "not_found"
    # A party must name the other party as the target.
    assert (await refusal(signal(b, group, carol, call, "accept"))).code == "forbidden"
    # The caller's other devices are not in the call.
    laptop = await alice.connect(device_id="laptop")
    assert (await refusal(signal(laptop, group, bob, call, "cancel"))).code == "forbidden"
    await signal(a, group, bob, call, "cancel")
    await asyncio.sleep(0.2)
    assert [f["action"] for f in rtc_pushes(b)] == ["cancel"]
    assert rtc_pushes(c) == [] and rtc_pushes(m) == []


async def test_bad_frames_sizes_and_self_calls_are_refused_without_side_effects(
    small_limits: QimDeployment, tenants: tuple[TenantHandle, TenantHandle],
) -> None:
    acme, _ = tenants
    alice, bob = acme.persona("alice"), acme.persona("bob")
    conversation = direct(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    base = {"conversation_id": conversation, "target_user_id": bob.user_id, "call_id": new_call_id()}

    for bad in (
        {**base, "action": "busy"},                      # server-only actions
        {**base, "action": "timeout"},
        {**base, "action": "dial"},
        {**base, "action": "invite", "call_id": ""},
        {**base, "action": "invite", "call_id": "x" * 65},
        {**base, "action": "invite", "call_id": 7},
        {**base, "action": "invite", "target_user_id": None},
        {k: v for k, v in base.items() if k != "conversation_id"} | {"action": "invite"},
    ):
        assert (await refusal(a.request("RTC_SIGNAL", **bad))).code == "bad_frame"
    big = {"sdp": {"type": "offer", "sdp": "a" * MAX_PAYLOAD}}
    assert (await refusal(signal(a, conversation, bob, new_call_id(), "invite", big))).code == "too_large"
    assert (await refusal(signal(a, conversation, alice, new_call_id(), "invite"))).code == "bad_frame"
    await asyncio.sleep(0.2)
    assert rtc_pushes(b) == []
    assert small_limits.db.count("rtc_callrecord", "conversation_id = ?", (conversation,)) == 0


async def test_invites_count_against_the_per_user_message_rate(tenants: tuple[TenantHandle, TenantHandle]) -> None:
    acme, _ = tenants
    alice = acme.persona("alice")
    callees = [acme.persona(f"bob{i}") for i in range(RATE + 2)]
    conversations = [direct(alice, callee) for callee in callees]
    a = await alice.connect()
    results = []
    for conversation, callee in zip(conversations, callees):
        try:
            results.append((await signal(a, conversation, callee, new_call_id(), "invite"))["state"])
        except QimError as refused:
            results.append(refused.code)
            assert refused.retry_after_ms is not None and refused.retry_after_ms >= 0
    assert results == ["ringing"] * RATE + ["rate_limited"] * 2
