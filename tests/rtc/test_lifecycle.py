"""The call lifecycle over real sockets, on the embedded default and across two nodes:
relay, accept, hangup, cancel, reject, busy, the callee's other devices, races, conflicts."""

from __future__ import annotations

import asyncio

import pytest

from qimclient import QimError
from tests.harness.personas import api_ok
from tests.rtc.conftest import Rig
from tests.rtc.rtc_helpers import (
    CALL_RECORD,
    call_records,
    direct,
    new_call_id,
    next_signal,
    record_rows,
    rtc_pushes,
    signal,
    unread_of,
    wait_until_registry,
)

OFFER = {"sdp": {"type": "offer", "sdp": "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n"}}
ANSWER = {"sdp": {"type": "answer", "sdp": "v=0\r\no=- 3 4 IN IP4 127.0.0.1\r\n"}}


def candidate(n: int) -> dict:
    return {"candidate": {"candidate": f"candidate:{n} 1 udp 2122260223 10.0.0.{n} 5000{n} typ host",
                          "sdpMid": "0", "sdpMLineIndex": 0}}


async def test_invite_ring_accept_media_both_ways_then_hangup_is_one_completed_record(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a = await alice.connect(rig.caller_node)
    b = await bob.connect(rig.callee_node)
    call = new_call_id()

    ack = await signal(a, conversation, bob, call, "invite", {"media": "audio"})
    assert (ack["type"], ack["call_id"], ack["state"]) == ("ACK", call, "ringing")
    assert (ack["delivered_connections"], ack["pushed"]) == (1, False)
    invite = await next_signal(b)
    assert invite == {
        "type": "RTC_SIGNAL", "conversation_id": conversation, "from_user_id": alice.user_id,
        "from_device_id": "phone", "call_id": call, "action": "invite",
        "ring_deadline_ms": ack["ring_deadline_ms"], "signal_payload": {"media": "audio"},
    }

    assert (await signal(b, conversation, alice, call, "ringing"))["state"] == "ringing"
    assert (await next_signal(a))["action"] == "ringing"
    accepted = await signal(b, conversation, alice, call, "accept")
    assert (accepted["state"], accepted["delivered_connections"]) == ("accepted", 1)
    assert (await next_signal(a))["action"] == "accept"

    await signal(a, conversation, bob, call, "sdp", OFFER)
    got = await next_signal(b)
    assert (got["action"], got["signal_payload"], got["from_user_id"]) == ("sdp", OFFER, alice.user_id)
    await signal(b, conversation, alice, call, "sdp", ANSWER)
    assert (await next_signal(a))["signal_payload"] == ANSWER
    for n in (1, 2):
        await signal(a, conversation, bob, call, "candidate", candidate(n))
        await signal(b, conversation, alice, call, "candidate", candidate(n + 10))
    assert [(await next_signal(b))["signal_payload"] for _ in range(2)] == [candidate(1), candidate(2)]
    assert [(await next_signal(a))["signal_payload"] for _ in range(2)] == [candidate(11), candidate(12)]

    ended = await signal(a, conversation, bob, call, "hangup")
    assert ended["state"] == "completed"
    assert (await next_signal(b))["action"] == "hangup"

    records = await call_records(b, conversation)
    assert len(records) == 1 and record_rows(rig.deployment, call) == 1
    payload = records[0]["payload"]
    assert {k: payload[k] for k in ("call_id", "caller_id", "callee_id", "outcome")} == {
        "call_id": call, "caller_id": alice.user_id, "callee_id": bob.user_id, "outcome": "completed",
    }
    assert isinstance(payload["duration_s"], int) and payload["duration_s"] >= 0
    assert records[0]["sender_id"] == alice.user_id

    with pytest.raises(QimError) as late:
        await signal(a, conversation, bob, call, "sdp", OFFER)
    assert late.value.code == "conflict"
    await asyncio.sleep(0.3)
    assert rtc_pushes(a) == [] and rtc_pushes(b) == []


async def test_the_first_device_to_accept_takes_the_call_and_the_others_get_cancel(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a = await alice.connect(rig.caller_node)
    phone = await bob.connect(rig.callee_node, device_id="phone")
    tablet = await bob.connect(rig.caller_node, device_id="tablet")
    call = new_call_id()

    assert (await signal(a, conversation, bob, call, "invite"))["delivered_connections"] == 2
    assert (await next_signal(phone))["action"] == "invite"
    assert (await next_signal(tablet))["action"] == "invite"
    await signal(phone, conversation, alice, call, "accept")
    cancel = await next_signal(tablet)
    assert (cancel["action"], cancel["from_device_id"]) == ("cancel", None)
    assert cancel["signal_payload"] == {"reason": "answered_elsewhere", "device_id": "phone"}
    assert (await next_signal(a))["action"] == "accept"

    sent = await signal(a, conversation, bob, call, "sdp", OFFER)
    assert sent["delivered_connections"] == 1
    assert (await next_signal(phone))["action"] == "sdp"
    with pytest.raises(QimError) as second:
        await signal(tablet, conversation, alice, call, "accept")
    assert second.value.code == "conflict"
    with pytest.raises(QimError) as outsider:
        await signal(tablet, conversation, alice, call, "sdp", ANSWER)
    assert outsider.value.code == "forbidden"

    assert (await signal(phone, conversation, alice, call, "hangup"))["state"] == "completed"
    assert (await next_signal(a))["action"] == "hangup"
    await asyncio.sleep(0.3)
    assert rtc_pushes(tablet) == [] and rtc_pushes(phone) == []


async def test_the_caller_cancels_while_ringing(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a, phone, tablet, call = await rig.ringing_on_two_devices(alice, bob, conversation)

    assert (await signal(a, conversation, bob, call, "cancel"))["state"] == "cancelled"
    assert (await next_signal(phone))["action"] == "cancel"
    assert (await next_signal(tablet))["action"] == "cancel"
    with pytest.raises(QimError) as late:
        await signal(phone, conversation, alice, call, "accept")
    assert late.value.code == "conflict"
    (record,) = await call_records(a, conversation)
    assert record["payload"]["outcome"] == "cancelled" and record["payload"]["duration_s"] == 0


async def test_the_callee_rejects_and_their_other_devices_stop_ringing(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a, phone, tablet, call = await rig.ringing_on_two_devices(alice, bob, conversation)

    assert (await signal(phone, conversation, alice, call, "reject"))["state"] == "rejected"
    rejected = await next_signal(a)
    assert (rejected["action"], rejected["from_user_id"], rejected["from_device_id"]) == ("reject", bob.user_id, "phone")
    stop = await next_signal(tablet)
    assert (stop["action"], stop["signal_payload"]["reason"]) == ("cancel", "rejected_elsewhere")
    (record,) = await call_records(phone, conversation)
    assert record["payload"]["outcome"] == "rejected"


async def test_a_callee_in_another_call_is_busy(rig: Rig) -> None:
    alice, bob, carol = (rig.tenant.persona(n) for n in ("alice", "bob", "carol"))
    alice_bob, carol_bob = direct(alice, bob), direct(carol, bob)
    a = await alice.connect(rig.caller_node)
    c = await carol.connect(rig.callee_node)
    b = await bob.connect(rig.callee_node)
    first = new_call_id()
    await signal(a, alice_bob, bob, first, "invite")
    await next_signal(b)

    attempt = new_call_id()
    busy = await signal(c, carol_bob, bob, attempt, "invite")
    assert (busy["state"], busy["delivered_connections"], busy["pushed"]) == ("busy", 0, False)
    told = await next_signal(c)
    assert (told["action"], told["call_id"], told["from_user_id"]) == ("busy", attempt, bob.user_id)
    (record,) = await call_records(c, carol_bob)
    assert record["payload"] == {"call_id": attempt, "caller_id": carol.user_id, "callee_id": bob.user_id,
                                 "outcome": "busy", "duration_s": 0}

    await signal(b, alice_bob, alice, first, "accept")
    assert (await signal(c, carol_bob, bob, new_call_id(), "invite"))["state"] == "busy"
    await signal(a, alice_bob, bob, first, "hangup")
    retry = await signal(c, carol_bob, bob, new_call_id(), "invite")
    assert retry["state"] == "ringing"
    await asyncio.sleep(0.2)
    assert [(f["action"], f["call_id"]) for f in rtc_pushes(b)] == [("hangup", first), ("invite", retry["call_id"])]


async def test_both_parties_hanging_up_at_once_write_one_record(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a = await alice.connect(rig.caller_node)
    b = await bob.connect(rig.callee_node)
    calls = [new_call_id() for _ in range(5)]
    for call in calls:
        await signal(a, conversation, bob, call, "invite")
        await signal(b, conversation, alice, call, "accept")
        results = await asyncio.gather(
            signal(a, conversation, bob, call, "hangup"), signal(b, conversation, alice, call, "hangup"),
            return_exceptions=True,
        )
        wins = [r for r in results if isinstance(r, dict)]
        assert wins and all(r["state"] == "completed" for r in wins)
        assert all(r.code == "conflict" for r in results if isinstance(r, QimError))
        assert record_rows(rig.deployment, call) == 1
    records = await call_records(a, conversation)
    assert sorted(r["payload"]["call_id"] for r in records) == sorted(calls)
    # Completed calls count unread for the callee (the registry's default for the type).
    assert await unread_of(b, conversation) == 5 and await unread_of(a, conversation) == 0


async def test_illegal_transitions_are_conflicts_and_unknown_calls_not_found(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a = await alice.connect(rig.caller_node)
    b = await bob.connect(rig.callee_node)
    call = new_call_id()
    await signal(a, conversation, bob, call, "invite")

    async def code_of(client, target, action: str, call_id: str = call) -> str:  # type: ignore[no-untyped-def]
        with pytest.raises(QimError) as refused:
            await signal(client, conversation, target, call_id, action)
        return refused.value.code

    assert await code_of(a, bob, "invite") == "conflict"       # call_id taken
    assert await code_of(a, bob, "accept") == "conflict"       # the caller cannot accept
    assert await code_of(a, bob, "ringing") == "conflict"
    assert await code_of(b, alice, "cancel") == "conflict"     # the callee rejects, not cancels
    assert await code_of(b, alice, "accept", "no-such-call") == "not_found"
    await signal(b, conversation, alice, call, "reject")
    assert await code_of(b, alice, "accept") == "conflict"
    assert await code_of(a, bob, "candidate") == "conflict"
    assert await code_of(a, bob, "invite") == "conflict"       # an ended call's id stays taken


async def test_whether_call_records_count_unread_follows_the_tenants_registry(rig: Rig) -> None:
    tenant = rig.deployment.tenants["globex"]
    api_ok(tenant.node, "PATCH", f"registry/types/{CALL_RECORD}", tenant.admin_token, json={"counts_unread": False})
    try:
        alice, bob = tenant.persona("alice"), tenant.persona("bob")
        conversation = direct(alice, bob)
        a = await alice.connect(rig.caller_node)
        b = await bob.connect(rig.callee_node)
        # Both nodes serve the changed type before the call (each re-reads within a second,
        # later on a loaded machine): polled, not slept on.
        for client in (a, b):
            await wait_until_registry(client, CALL_RECORD, counts_unread=False)
        call = new_call_id()
        await signal(a, conversation, bob, call, "invite")
        await signal(a, conversation, bob, call, "cancel")
        (record,) = await call_records(b, conversation)
        assert record["payload"]["outcome"] == "cancelled"
        assert await unread_of(b, conversation) == 0
    finally:
        api_ok(tenant.node, "PATCH", f"registry/types/{CALL_RECORD}", tenant.admin_token, json={"counts_unread": True})
        await tenant.close_clients()
