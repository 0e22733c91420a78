"""qimclient's calls against a real node: a full call, a rejected, a cancelled and a busy one,
each Call following the ACKs and pushes to its outcome, the record in history; a late invite
reported as expired. The state rules against scripted frames."""

from __future__ import annotations

import asyncio

import pytest

from qimclient import Call, CallTracker, QimClient, UnknownCall
from tests.core.conversation_helpers import create_group
from tests.harness.personas import TenantHandle

CALL_RECORD = "qim.call_record.v1"
OFFER = {"type": "offer", "sdp": "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n"}
ANSWER = {"type": "answer", "sdp": "v=0\r\no=- 3 4 IN IP4 127.0.0.1\r\n"}
CANDIDATE = {"candidate": "candidate:1 1 udp 2122260223 10.0.0.1 50001 typ host", "sdpMid": "0", "sdpMLineIndex": 0}
QUIET = 0.3


async def record_of(client: QimClient, conversation_id: str, call_id: str) -> dict:
    records = [m for m in await client.history(conversation_id) if m["content_type"] == CALL_RECORD]
    assert [r["payload"]["call_id"] for r in records] == [call_id]
    return records[0]["payload"]


async def assert_no_more_signals(*clients: QimClient) -> None:
    await asyncio.sleep(QUIET)
    for client in clients:
        assert client.drain_call_signals() == []


async def test_a_full_call_rings_connects_relays_media_and_hangs_up_completed(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    conversation = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    seen: list[tuple[dict, str]] = []
    invited = asyncio.Event()

    def on_signal(frame: dict) -> None:
        seen.append((frame, b.calls[frame["call_id"]].state))
        if frame["action"] == "invite":
            invited.set()

    b.on_call_signal(on_signal)

    call = await a.place_call(conversation, bob.user_id, payload={"media": "audio"})
    assert (call.role, call.state, call.peer_user_id) == ("caller", "ringing", bob.user_id)
    assert isinstance(call.ring_deadline_ms, int) and a.calls == {call.call_id: call}
    await asyncio.wait_for(invited.wait(), 5)
    invite, state_seen = seen[0]
    assert (invite["from_user_id"], invite["conversation_id"], invite["expired"]) == (alice.user_id, conversation, False)
    assert invite["ring_deadline_ms"] == call.ring_deadline_ms and state_seen == "ringing"
    incoming = b.calls[call.call_id]
    assert (incoming.role, incoming.peer_user_id, incoming.invite_payload) == ("callee", alice.user_id, {"media": "audio"})
    assert incoming.should_ring(b.call_tracker.clock())
    assert (await b.next_call_signal(timeout=5, call_id=call.call_id))["action"] == "invite"

    await b.send_ringing(call.call_id)
    assert (await a.next_call_signal(timeout=5))["action"] == "ringing"
    assert (await b.answer(call.call_id))["state"] == "accepted"
    assert incoming.state == "accepted"
    assert (await a.next_call_signal(timeout=5))["action"] == "accept"
    assert call.state == "accepted"

    await a.send_sdp(call.call_id, OFFER)
    assert (await b.next_call_signal(timeout=5))["signal_payload"] == {"sdp": OFFER}
    await b.send_sdp(call.call_id, ANSWER)
    assert (await a.next_call_signal(timeout=5))["signal_payload"] == {"sdp": ANSWER}
    await a.send_candidate(call.call_id, CANDIDATE)
    await b.send_candidate(call.call_id, None)
    assert (await b.next_call_signal(timeout=5))["signal_payload"] == {"candidate": CANDIDATE}
    assert (await a.next_call_signal(timeout=5))["signal_payload"] == {"candidate": None}

    assert (await a.hang_up(call.call_id))["state"] == "completed"
    assert (await b.next_call_signal(timeout=5))["action"] == "hangup"
    assert (call.state, call.outcome) == (incoming.state, incoming.outcome) == ("ended", "completed")
    record = await record_of(b, conversation, call.call_id)
    assert (record["outcome"], record["caller_id"], record["callee_id"]) == ("completed", alice.user_id, bob.user_id)
    assert [frame["action"] for frame, _ in seen] == ["invite", "sdp", "candidate", "hangup"]
    await assert_no_more_signals(a, b)


async def test_a_rejected_call_ends_rejected_on_both_sides_with_the_reason(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    conversation = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()

    call = await a.place_call(conversation, bob.user_id, call_id=f"reject-{bob.user_id}")
    assert call.call_id == f"reject-{bob.user_id}"
    await b.next_call_signal(timeout=5)
    assert (await b.reject(call.call_id, reason="in a meeting"))["state"] == "rejected"
    pushed = await a.next_call_signal(timeout=5)
    assert (pushed["action"], pushed["signal_payload"]) == ("reject", {"reason": "in a meeting"})
    assert (call.state, call.outcome, call.reason) == ("ended", "rejected", "in a meeting")
    assert (b.calls[call.call_id].state, b.calls[call.call_id].outcome) == ("ended", "rejected")
    assert (await record_of(b, conversation, call.call_id))["outcome"] == "rejected"
    await assert_no_more_signals(a, b)


async def test_a_cancelled_call_ends_cancelled_for_the_callee(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    conversation = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()

    call = await a.place_call(conversation, bob.user_id)
    await b.next_call_signal(timeout=5)
    assert (await a.cancel(call.call_id))["state"] == "cancelled"
    assert (await b.next_call_signal(timeout=5))["action"] == "cancel"
    incoming = b.calls[call.call_id]
    assert (call.outcome, incoming.state, incoming.outcome) == ("cancelled", "ended", "cancelled")
    assert not incoming.should_ring(b.call_tracker.clock())
    assert (await record_of(b, conversation, call.call_id))["outcome"] == "cancelled"
    with pytest.raises(UnknownCall):
        await b.answer("no-such-call")
    await assert_no_more_signals(a, b)


async def test_calling_someone_already_ringing_ends_busy_from_the_server(acme: TenantHandle) -> None:
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    a, b, c = await alice.connect(), await bob.connect(), await carol.connect()
    first = await a.place_call(create_group(alice, bob), bob.user_id)
    await b.next_call_signal(timeout=5)

    second = await c.place_call(create_group(carol, bob), bob.user_id)
    busy = await c.next_call_signal(timeout=5)
    assert (busy["action"], busy["from_device_id"]) == ("busy", None)
    assert (second.state, second.outcome) == ("ended", "busy")
    await a.cancel(first.call_id)
    assert (await b.next_call_signal(timeout=5))["action"] == "cancel"
    await assert_no_more_signals(a, b, c)


async def test_an_invite_that_arrives_after_its_deadline_is_reported_expired_not_rung(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    conversation = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    b.call_tracker.clock = lambda: 2**62  # bob's device sees the invite long after ringing ended

    call = await a.place_call(conversation, bob.user_id)
    invite = await b.next_call_signal(timeout=5)
    assert (invite["action"], invite["expired"]) == ("invite", True)
    late = b.calls[call.call_id]
    assert (late.expired, late.state, late.outcome) == (True, "ended", "missed")
    assert not late.should_ring(b.call_tracker.clock())
    await a.cancel(call.call_id)
    await b.next_call_signal(timeout=5)
    assert late.outcome == "missed"  # already given up on; nothing rings again


def test_a_hangup_that_overtakes_an_ack_is_not_undone_by_it() -> None:
    tracker = CallTracker()
    call = tracker.begin_outgoing("c1", "conv", "bob", None)
    tracker.apply_ack(call, {"state": "ringing", "ring_deadline_ms": 5})
    tracker.accept({"type": "RTC_SIGNAL", "call_id": "c1", "action": "accept", "from_device_id": "phone"})
    tracker.accept({"type": "RTC_SIGNAL", "call_id": "c1", "action": "hangup", "from_device_id": "phone",
                    "signal_payload": {"reason": "bye"}})
    tracker.apply_ack(call, {"state": "accepted"})  # the ACK of an sdp sent before the hangup
    assert (call.state, call.outcome, call.reason) == ("ended", "completed", "bye")


def test_server_cancels_to_other_devices_and_a_voip_woken_call_are_tracked() -> None:
    tracker = CallTracker()
    tracker.clock = lambda: 1_000
    for call_id, reason in (("c1", "answered_elsewhere"), ("c2", "rejected_elsewhere")):
        tracker.accept({"type": "RTC_SIGNAL", "call_id": call_id, "action": "invite", "from_user_id": "alice",
                        "conversation_id": "conv", "from_device_id": "phone", "ring_deadline_ms": 2_000})
        tracker.accept({"type": "RTC_SIGNAL", "call_id": call_id, "action": "cancel", "from_device_id": None,
                        "signal_payload": {"reason": reason, "device_id": "tablet"}})
    assert [(c.state, c.outcome, c.reason) for c in tracker.calls.values()] == [
        ("ended", None, "answered_elsewhere"), ("ended", "rejected", "rejected_elsewhere"),
    ]
    woken: Call = tracker.track_incoming("c3", "conv", "alice", 1_500)
    assert (woken.role, woken.peer_user_id, woken.should_ring(1_200), woken.should_ring(1_500)) == (
        "callee", "alice", True, False,
    )
    assert [f["action"] for f in tracker.drain_signals()] == ["invite", "cancel", "invite", "cancel"]
