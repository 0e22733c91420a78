"""The call lifecycle (design §5, protocol.md §9): each RTC_SIGNAL action checked against the
shared call state and applied by compare-and-set, then relayed; the ring timers and sweeps
that end calls nobody ends. What it writes to the database is in rtc/actions.py."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from qim.clock import now_ms
from qim.conf import limit
from qim.gateway.db import in_db_thread
from qim.errors import Refused
from qim.node.connection import Connection
from qim.node.connection_node import get_node
from rtc.actions import do_queue_voip_pushes, do_record_call
from rtc.calls import (
    ACCEPTED,
    BUSY,
    CANCELLED,
    COMPLETED,
    ENDED,
    MISSED,
    REJECTED,
    RINGING,
    Call,
    get_call_store,
)
from rtc.departures import CallDepartures, OrphanedCalls
from rtc.queries import access_call_parties
from rtc.relay import notify_server_signal, notify_signal, route_to_other_party
from rtc.ring_timer import RingTimers

logger = logging.getLogger(__name__)

INVITE, RING, ACCEPT, REJECT, CANCEL, HANGUP, SDP, CANDIDATE = (
    "invite", "ringing", "accept", "reject", "cancel", "hangup", "sdp", "candidate",
)
CLIENT_ACTIONS = (INVITE, RING, ACCEPT, REJECT, CANCEL, HANGUP, SDP, CANDIDATE)
CALLER, CALLEE = "caller", "callee"
# One legal (state, side, action): (sender's connection, call as read, signal, side) -> ACK.
Step = Callable[[Connection, "Call", "Signal", str], Awaitable["SignalAck"]]


@dataclass(frozen=True)
class Signal:
    """An RTC_SIGNAL as the client sent it, its payload already measured and encoded."""

    conversation_id: str
    target_user_id: str
    call_id: str
    action: str
    payload_json: str


@dataclass(frozen=True)
class SignalAck:
    call_id: str
    # ringing or accepted while the call lasts, then its outcome (completed, missed, ...).
    state: str
    delivered_connections: int
    pushed: bool
    ring_deadline_ms: int | None = None

    def frame(self) -> dict:
        frame = {"type": "ACK", **self.__dict__}
        if self.ring_deadline_ms is None:
            del frame["ring_deadline_ms"]
        return frame


def wire_state(call: Call) -> str:
    return call.outcome if call.state == ENDED else call.state


async def check_rtc_signal(conn: Connection, signal: Signal) -> SignalAck:
    """Apply one client action to its call. Raises Refused: `not_found` (conversation of
    another tenant, unknown call), `forbidden` (not a member, not a party, a device that is not
    in the call), `conflict` (call_id taken, an action the call's state does not allow)."""
    if signal.action == INVITE:
        return await check_invite(conn, signal)
    store = get_call_store()
    call = await store.get(conn.tenant_id, signal.call_id)
    if call is None:
        raise Refused("not_found", f"no call {signal.call_id!r}")
    side = check_party(call, conn, signal)
    if call.state == RINGING and now_ms() >= call.ring_deadline_ms:
        # The lazy half of the ring timeout: whichever node sees the deadline passed ends it.
        await expire_ringing_call(call.tenant_id, call.call_id)
        raise Refused("conflict", "the call was not answered in time: it is missed")
    step = _STEPS.get((call.state, side, signal.action))
    if step is None:
        raise Refused("conflict", f"{signal.action!r} is not allowed for the {side} of a {wire_state(call)} call")
    return await step(conn, call, signal, side)


def check_party(call: Call, conn: Connection, signal: Signal) -> str:
    """The sender's side of the call; the target must be the other party."""
    side = call.party(conn.user_id)
    if side is None or signal.target_user_id != call.other(conn.user_id):
        raise Refused("forbidden", "you and the target are not the two parties of this call")
    if signal.conversation_id != call.conversation_id:
        raise Refused("conflict", "this call belongs to another conversation")
    return side


def check_device_in_call(call: Call, conn: Connection, side: str) -> None:
    """The caller takes part from the device that invited; the callee from any device until
    one accepts, then from that one only."""
    device = call.caller_device_id if side == CALLER else call.callee_device_id
    if device and conn.device_id != device:
        raise Refused("forbidden", "this device is not in the call")


async def check_invite(conn: Connection, signal: Signal) -> SignalAck:
    """Authorize an invite (both parties members now, call_id never recorded), then start it."""
    await in_db_thread(access_call_parties)(
        conn.tenant_id, conn.user_pk, signal.conversation_id, signal.target_user_id, signal.call_id
    )
    now = now_ms()
    call = Call(
        tenant_id=conn.tenant_id, call_id=signal.call_id, conversation_id=signal.conversation_id,
        caller_id=conn.user_id, caller_device_id=conn.device_id, callee_id=signal.target_user_id,
        state=RINGING, created_at_ms=now,
        ring_deadline_ms=now + int(limit("rtc_ring_timeout_s") * 1000), node_id=get_node().node_id,
    )
    return await do_invite(call, signal.payload_json, now)


async def do_invite(call: Call, payload_json: str, now: int) -> SignalAck:
    """Store the call and ring the callee's online devices (this node runs its ring timer), or
    queue VoIP pushes when none is online; when the callee is in another active call the call
    ends at once as busy: a record, and `busy` to the caller. `conflict` for a taken call_id."""
    stored = await get_call_store().create(call, now)
    if stored is None:
        raise Refused("conflict", f"call_id {call.call_id!r} is taken")
    if stored.state == ENDED:
        await in_db_thread(do_record_call)(stored)
        await notify_server_signal(stored, stored.caller_id, BUSY, {}, only=stored.caller_device_id)
        return SignalAck(stored.call_id, BUSY, 0, False)
    ring_timers.schedule(stored)
    deadline = {"ring_deadline_ms": stored.ring_deadline_ms}
    delivered = await notify_signal(stored, stored.caller_id, stored.caller_device_id, INVITE, payload_json, deadline)
    pushed = 0
    if delivered == 0:
        pushed = await in_db_thread(do_queue_voip_pushes)(stored, now)
    return SignalAck(stored.call_id, RINGING, delivered, pushed > 0, stored.ring_deadline_ms)


async def do_relay(conn: Connection, call: Call, signal: Signal, side: str) -> SignalAck:
    """sdp, candidate and the callee's informational `ringing`: passed on, state unchanged."""
    check_device_in_call(call, conn, side)
    delivered = await notify_signal(call, conn.user_id, conn.device_id, signal.action, signal.payload_json)
    if call.state == ACCEPTED:
        await get_call_store().touch(call)
    return SignalAck(call.call_id, wire_state(call), delivered, False)


async def do_accept(conn: Connection, call: Call, signal: Signal, side: str) -> SignalAck:
    """The callee device that accepts joins the call; the callee's other devices get
    `cancel` and nothing after it."""
    now = now_ms()
    accepted = await get_call_store().transition(
        call, ACCEPTED, {"callee_device_id": conn.device_id, "accepted_at_ms": now}, ringing_until_ms=now
    )
    if accepted is None:
        raise await lost_race(call)
    ring_timers.cancel(call.tenant_id, call.call_id)
    delivered = await notify_signal(accepted, conn.user_id, conn.device_id, ACCEPT, signal.payload_json)
    await notify_server_signal(
        accepted, accepted.callee_id, CANCEL, {"reason": "answered_elsewhere", "device_id": conn.device_id},
        exclude=conn.device_id,
    )
    return SignalAck(call.call_id, ACCEPTED, delivered, False)


def _ending(outcome: str) -> Step:
    async def step(conn: Connection, call: Call, signal: Signal, side: str) -> SignalAck:
        return await do_end_call(conn, call, signal, side, outcome)

    return step


async def do_end_call(conn: Connection, call: Call, signal: Signal, side: str, outcome: str) -> SignalAck:
    """reject, cancel, hangup: end the call (one winner when both sides end it at once), write
    its record, tell the other party; a callee's reject also stops their other devices."""
    check_device_in_call(call, conn, side)
    now = now_ms()
    changes: dict[str, object] = {"outcome": outcome, "ended_at_ms": now}
    if outcome == COMPLETED:
        changes["duration_s"] = max(0, round((now - call.accepted_at_ms) / 1000))
    ended = await get_call_store().transition(call, ENDED, changes)
    if ended is None:
        raise await lost_race(call)
    ring_timers.cancel(call.tenant_id, call.call_id)
    await in_db_thread(do_record_call)(ended)
    delivered = await notify_signal(ended, conn.user_id, conn.device_id, signal.action, signal.payload_json)
    if side == CALLEE and call.state == RINGING:
        await notify_server_signal(
            ended, ended.callee_id, CANCEL, {"reason": "rejected_elsewhere", "device_id": conn.device_id},
            exclude=conn.device_id,
        )
    return SignalAck(call.call_id, outcome, delivered, False)


async def lost_race(call: Call) -> Refused:
    """Someone changed the call between our read and our write: say what it is now."""
    current = await get_call_store().get(call.tenant_id, call.call_id)
    if current is not None and current.state == RINGING and now_ms() >= current.ring_deadline_ms:
        await expire_ringing_call(call.tenant_id, call.call_id)
        return Refused("conflict", "the call was not answered in time: it is missed")
    state = wire_state(current) if current is not None else "gone"
    return Refused("conflict", f"the call changed meanwhile: it is {state}")


async def expire_ringing_call(tenant_id: int, call_id: str) -> None:
    """End a ringing call past its deadline as missed, write its record, and send `timeout` to
    the caller's device and every callee device. Idempotent; safe on several nodes at once."""
    store = get_call_store()
    call = await store.get(tenant_id, call_id)
    if call is None or call.state != RINGING:
        await store.forget_ringing(tenant_id, call_id)
        return
    now = now_ms()
    if now < call.ring_deadline_ms:
        return
    ended = await store.transition(call, ENDED, {"outcome": MISSED, "ended_at_ms": now})
    if ended is None:
        return
    ring_timers.cancel(tenant_id, call_id)
    await in_db_thread(do_record_call)(ended)
    payload = {"ring_deadline_ms": ended.ring_deadline_ms}
    await notify_server_signal(ended, ended.caller_id, "timeout", payload, only=ended.caller_device_id)
    await notify_server_signal(ended, ended.callee_id, "timeout", payload)


def takes_part(call: Call, user_id: str, device_id: str) -> bool:
    """Is this device in the call, so that the call cannot go on without it? The caller's
    inviting device always; a callee device once it accepted. A ringing callee device is not:
    the callee's other devices ring on, and a VoIP push may still wake one to answer."""
    if user_id == call.caller_id:
        return device_id == call.caller_device_id
    return user_id == call.callee_id and call.state == ACCEPTED and device_id == call.callee_device_id


async def end_abandoned_call(tenant_id: int, call_id: str, user_id: str, device_id: str, vanished_at_ms: int) -> bool:
    """The party `user_id` lost device `device_id` (its last connection closed at
    `vanished_at_ms` and it did not come back within rtc_disconnect_grace_s): end the call as
    that party would have. A ringing call its caller left is `cancelled` (`cancel` to every
    callee device); an accepted call is `completed`, lasting from accept to the disconnect
    (`hangup` to the other party's device in the call). Both signals come from the server:
    `from_user_id` the vanished party, `from_device_id` null, payload {"reason": "disconnected"}.
    A ringing call past its deadline is missed instead. Compare-and-set, re-read when someone
    changed the call first (an accept during the grace): one winner, one record. Answers
    whether it was this call that ended it."""
    store = get_call_store()
    ended: Call | None = None
    for _ in range(3):  # each lost race is someone else's transition: few
        call = await store.get(tenant_id, call_id)
        if call is None or not call.active or not takes_part(call, user_id, device_id):
            return False
        if call.state == RINGING and now_ms() >= call.ring_deadline_ms:
            await expire_ringing_call(tenant_id, call_id)
            return False
        ended_at = max(vanished_at_ms, call.accepted_at_ms)  # accepted during the grace: 0 s
        changes: dict[str, object] = {"ended_at_ms": ended_at}
        if call.state == RINGING:
            changes["outcome"], action = CANCELLED, CANCEL
        else:
            changes["outcome"], action = COMPLETED, HANGUP
            changes["duration_s"] = max(0, round((ended_at - call.accepted_at_ms) / 1000))
        ended = await store.transition(call, ENDED, changes)
        if ended is not None:
            break
    if ended is None:
        return False
    ring_timers.cancel(tenant_id, call_id)
    await in_db_thread(do_record_call)(ended)
    to_user, device = route_to_other_party(ended, user_id)
    await notify_server_signal(ended, to_user, action, {"reason": "disconnected"}, only=device)
    return True


_STEPS: dict[tuple[str, str, str], Step] = {
    (RINGING, CALLEE, RING): do_relay,
    (RINGING, CALLEE, ACCEPT): do_accept,
    (RINGING, CALLEE, REJECT): _ending(REJECTED),
    (RINGING, CALLEE, HANGUP): _ending(REJECTED),
    (RINGING, CALLER, CANCEL): _ending(CANCELLED),
    (RINGING, CALLER, HANGUP): _ending(CANCELLED),
    (ACCEPTED, CALLER, HANGUP): _ending(COMPLETED),
    (ACCEPTED, CALLEE, HANGUP): _ending(COMPLETED),
    **{(state, side, action): do_relay for state in (RINGING, ACCEPTED) for side in (CALLER, CALLEE)
       for action in (SDP, CANDIDATE)},
}

ring_timers = RingTimers(expire_ringing_call, get_call_store)
departures = CallDepartures(end_abandoned_call, takes_part, get_call_store, get_node)
orphaned_calls = OrphanedCalls(end_abandoned_call, get_call_store, get_node)


def ensure_sweeping() -> None:
    """Start this node's sweeps of ringing calls past their deadline and of accepted calls
    whose device is gone; called whenever RTC traffic touches the node."""
    ring_timers.ensure_sweeping()
    orphaned_calls.ensure_sweeping()
