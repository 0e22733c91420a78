"""Calls: RTC_SIGNAL requests and the client's view of each call's state (protocol.md §12), mixed into QimClient."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .codec import Frame
from .errors import QimClientError, QimError
from .pushes import PushCallback, PushCallbacks, PushQueue

logger = logging.getLogger("qimclient")

CALLER = "caller"
CALLEE = "callee"
# Call.state: the server's `ringing` / `accepted`, and `ended` for every outcome (§12 ACK state).
RINGING = "ringing"
ACCEPTED = "accepted"
ENDED = "ended"
OUTCOMES = ("completed", "missed", "rejected", "cancelled", "busy")
_RANK = {RINGING: 0, ACCEPTED: 1, ENDED: 2}
SIGNAL = "RTC_SIGNAL"


def new_call_id() -> str:
    """A fresh call_id for `invite` (§12: 1-64 characters, unique per tenant for good)."""
    return uuid.uuid4().hex


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class UnknownCall(QimClientError, LookupError):
    """A call action named a call_id this client does not track (no invite placed or seen)."""


@dataclass(eq=False)
class Call:
    """One call as this device sees it; `state` only moves forward (ringing, accepted, ended)."""

    call_id: str
    conversation_id: str
    # The other party: the callee for the caller, the caller for the callee; every signal
    # this device sends targets them (§12).
    peer_user_id: str
    role: str
    state: str = RINGING
    # Once ended: one of OUTCOMES; None when the call went on elsewhere (answered_elsewhere).
    outcome: str | None = None
    ring_deadline_ms: int | None = None
    # An invite that arrived after its ring_deadline_ms: reported, never to be rung.
    expired: bool = False
    # The free-text `reason` of the reject / cancel / hangup that ended it, if any.
    reason: str | None = None
    invite_payload: Any = None
    last_action: str | None = None

    @property
    def is_ended(self) -> bool:
        return self.state == ENDED

    def should_ring(self, now_ms: int) -> bool:
        """True while an incoming call may be shown as ringing (§12: never after the deadline)."""
        if self.role != CALLEE or self.state != RINGING or self.expired:
            return False
        return self.ring_deadline_ms is None or now_ms < self.ring_deadline_ms


class CallTracker:
    """The client's calls by call_id, fed by RTC_SIGNAL ACKs and pushes; pushes are handed on
    to callbacks and a queue after the call's state follows them.

    `accept` runs in the reader, so a call's signals are applied in arrival order. Collaborators
    are attributes: `clock` (ms since the epoch, judged against the server's ring_deadline_ms)
    and `call_ids` (invite ids).
    """

    def __init__(self, max_queued_signals: int = 1_000) -> None:
        self.calls: dict[str, Call] = {}
        self.clock: Callable[[], int] = wall_clock_ms
        self.call_ids: Callable[[], str] = new_call_id
        self._queue = PushQueue(max_queued_signals, key="call_id", noun="call signal")
        self._callbacks = PushCallbacks()

    # Driven by the call requests

    def begin_outgoing(self, call_id: str, conversation_id: str, callee_user_id: str, payload: Any) -> Call:
        # Tracked before the invite leaves: `busy` can overtake the invite's ACK.
        if call_id in self.calls:
            raise ValueError(f"call {call_id!r} is already tracked")
        call = Call(call_id, conversation_id, callee_user_id, CALLER, invite_payload=payload, last_action="invite")
        self.calls[call_id] = call
        return call

    def require(self, call_id: str) -> Call:
        call = self.calls.get(call_id)
        if call is None:
            raise UnknownCall(f"no call {call_id!r} is tracked by this client")
        return call

    def apply_ack(self, call: Call, ack: Frame) -> None:
        """The ACK's `state` is the server's: ringing, accepted, or the outcome once ended."""
        state = ack.get("state")
        if isinstance(ack.get("ring_deadline_ms"), int):
            call.ring_deadline_ms = ack["ring_deadline_ms"]
        if call.is_ended and not call.expired:
            return  # a signal that ended it overtook this ACK
        if state in OUTCOMES:
            self._end(call, state, force=call.expired)
        elif state in (RINGING, ACCEPTED):
            self._advance(call, state, force=call.expired)
        if call.state != ENDED:
            call.expired = False  # the server still had it live (e.g. the clocks disagree)

    # Incoming pushes (from the reader; never raises)

    def accept(self, frame: Frame) -> None:
        """An RTC_SIGNAL push: update its call, then hand on a copy (an invite's gets
        `expired`); the frame itself stays as the server sent it, for the push queue."""
        signal = dict(frame)
        try:
            self._apply_signal(signal)
        except Exception:  # a bug here must not stop the reader
            logger.exception("could not apply an RTC_SIGNAL for call %s", frame.get("call_id"))
        self._queue.put(signal)
        self._callbacks.dispatch(signal)

    def on_signal(self, callback: PushCallback) -> Callable[[], None]:
        return self._callbacks.add(SIGNAL, callback)

    async def next_signal(self, timeout: float | None, call_id: str | None) -> Frame:
        return await self._queue.get(timeout, call_id)

    def drain_signals(self) -> list[Frame]:
        return self._queue.drain()

    def _apply_signal(self, frame: Frame) -> None:
        action, call_id = frame.get("action"), frame.get("call_id")
        if not isinstance(call_id, str):
            return
        if action == "invite":
            self._incoming_invite(frame, call_id)
            return
        call = self.calls.get(call_id)
        if call is None:
            return  # e.g. woken by a VoIP push and not adopted: still handed on
        call.last_action = str(action)
        payload = frame.get("signal_payload")
        reason = payload.get("reason") if isinstance(payload, dict) else None
        if action == "accept":
            self._advance(call, ACCEPTED)
        elif action == "reject":
            self._end(call, "rejected", reason)
        elif action == "busy":
            self._end(call, "busy")
        elif action == "timeout":
            self._end(call, "missed")
        elif action == "cancel":
            self._incoming_cancel(call, frame, reason)
        elif action == "hangup":
            if call.state == ACCEPTED:
                self._end(call, "completed", reason)
            else:  # hangup while ringing: the caller cancels, the callee rejects (§12)
                self._end(call, "rejected" if call.role == CALLER else "cancelled", reason)

    def _incoming_invite(self, frame: Frame, call_id: str) -> None:
        call = self.track_incoming(
            call_id, frame.get("conversation_id"), frame.get("from_user_id"), frame.get("ring_deadline_ms"),
            frame.get("signal_payload"),
        )
        frame["expired"] = call.expired

    def track_incoming(
        self, call_id: str, conversation_id: Any, caller_id: Any, ring_deadline_ms: Any, payload: Any = None
    ) -> Call:
        """The Call for an invite (or a VoIP push); one past its deadline is expired and ended."""
        known = self.calls.get(call_id)
        if known is not None:
            return known  # delivered twice
        deadline = ring_deadline_ms if isinstance(ring_deadline_ms, int) else None
        call = Call(
            call_id, str(conversation_id), str(caller_id), CALLEE, ring_deadline_ms=deadline,
            expired=deadline is not None and deadline <= self.clock(), invite_payload=payload, last_action="invite",
        )
        if call.expired:
            # A late delivery of a dead call: the server ends it as missed (§12).
            call.state, call.outcome = ENDED, "missed"
        self.calls[call_id] = call
        return call

    def _incoming_cancel(self, call: Call, frame: Frame, reason: Any) -> None:
        if frame.get("from_device_id") is not None:
            self._end(call, "cancelled", reason)
        elif reason == "rejected_elsewhere":
            self._end(call, "rejected", reason)
        else:  # answered_elsewhere: the call goes on, on another of our devices
            self._end(call, None, reason)

    @staticmethod
    def _advance(call: Call, state: str, *, force: bool = False) -> None:
        if force or _RANK[state] > _RANK[call.state]:
            call.state = state

    @staticmethod
    def _end(call: Call, outcome: str | None, reason: Any = None, *, force: bool = False) -> None:
        if call.is_ended and not force:
            return
        call.state, call.outcome = ENDED, outcome
        if isinstance(reason, str):
            call.reason = reason


class CallRequests:
    """The §12 call actions, mixed into QimClient (which provides `request` and `call_tracker`)."""

    if TYPE_CHECKING:
        call_tracker: CallTracker

        async def request(self, frame_type: str, /, **fields: Any) -> Frame: ...

    @property
    def calls(self) -> dict[str, Call]:
        """Every call placed or seen by this client, by call_id (ended ones stay until forgotten)."""
        return self.call_tracker.calls

    async def place_call(
        self, conversation_id: str, callee_user_id: str, call_id: str | None = None, payload: Any = None
    ) -> Call:
        """`invite`; returns the tracked Call with the ACK's state (`ringing`, or ended `busy`)
        and `ring_deadline_ms`. Raises QimError when refused (the call is then not tracked):
        `conflict` for a call_id used before, `rate_limited`, `forbidden`. Never retried: a
        repeated invite of the same call_id answers `conflict`. After ConnectionLost or
        TimeoutError the call stays tracked (the server may have it)."""
        call_id = call_id or self.call_tracker.call_ids()
        call = self.call_tracker.begin_outgoing(call_id, conversation_id, callee_user_id, payload)
        try:
            ack = await self._signal(call, "invite", payload)
        except QimError:
            # Refused: no call exists. After ConnectionLost or TimeoutError the outcome is
            # unknown, so the call stays tracked for the signals that may still come.
            self.call_tracker.calls.pop(call_id, None)
            raise
        self.call_tracker.apply_ack(call, ack)
        return call

    async def send_ringing(self, call_id: str) -> Frame:
        """`ringing` (callee): tell the caller this device is ringing; returns the ACK."""
        return await self._act(call_id, "ringing", None)

    async def answer(self, call_id: str, payload: Any = None) -> Frame:
        """`accept` (callee); returns the ACK (state `accepted`). `conflict` once it ended."""
        return await self._act(call_id, "accept", payload)

    async def reject(self, call_id: str, reason: str | None = None, payload: Any = None) -> Frame:
        """`reject` (callee, while ringing); `reason` becomes `{"reason": ...}` unless `payload` is given."""
        return await self._act(call_id, "reject", _with_reason(payload, reason))

    async def cancel(self, call_id: str, reason: str | None = None, payload: Any = None) -> Frame:
        """`cancel` (caller, while ringing); returns the ACK (state `cancelled`)."""
        return await self._act(call_id, "cancel", _with_reason(payload, reason))

    async def hang_up(self, call_id: str, reason: str | None = None, payload: Any = None) -> Frame:
        """`hangup`: ends an accepted call `completed` (or a ringing one, as cancel or reject)."""
        return await self._act(call_id, "hangup", _with_reason(payload, reason))

    async def send_sdp(self, call_id: str, sdp: dict[str, Any]) -> Frame:
        """`sdp` with `{"sdp": sdp}` (an RTCSessionDescriptionInit); returns the ACK."""
        return await self._act(call_id, "sdp", {"sdp": sdp})

    async def send_candidate(self, call_id: str, candidate: dict[str, Any] | None) -> Frame:
        """`candidate` with `{"candidate": candidate}` (an RTCIceCandidateInit; None ends trickling)."""
        return await self._act(call_id, "candidate", {"candidate": candidate})

    def adopt_voip_call(self, push_payload: dict[str, Any]) -> Call:
        """Track a call announced by a VoIP push (`{type: "rtc.invite", call_id, conversation_id,
        caller_id, ring_deadline_ms}`), to `answer` or `reject` it; expired past its deadline."""
        return self.call_tracker.track_incoming(
            str(push_payload["call_id"]), push_payload.get("conversation_id"), push_payload.get("caller_id"),
            push_payload.get("ring_deadline_ms"),
        )

    def forget_call(self, call_id: str) -> None:
        """Stop tracking a call (its later signals are still handed on)."""
        self.call_tracker.calls.pop(call_id, None)

    def on_call_signal(self, callback: PushCallback) -> Callable[[], None]:
        """Call `callback(frame)` for each RTC_SIGNAL push, server-sent ones (busy, timeout,
        cancel) included, after `calls` has followed it; returns its remover. An invite has
        `expired` (true past its ring_deadline_ms: do not ring). Async callbacks run as tasks."""
        return self.call_tracker.on_signal(callback)

    async def next_call_signal(self, timeout: float | None = 10.0, call_id: str | None = None) -> Frame:
        """The next RTC_SIGNAL push (of `call_id`, if given; others stay queued in order).

        Raises TimeoutError when none arrives within `timeout` seconds; None waits forever.
        """
        return await self.call_tracker.next_signal(timeout, call_id)

    def drain_call_signals(self) -> list[Frame]:
        """Every queued RTC_SIGNAL push, oldest first, without waiting."""
        return self.call_tracker.drain_signals()

    async def _act(self, call_id: str, action: str, payload: Any) -> Frame:
        call = self.call_tracker.require(call_id)
        ack = await self._signal(call, action, payload)
        call.last_action = action
        self.call_tracker.apply_ack(call, ack)
        return ack

    async def _signal(self, call: Call, action: str, payload: Any) -> Frame:
        fields: dict[str, Any] = {
            "conversation_id": call.conversation_id, "target_user_id": call.peer_user_id,
            "call_id": call.call_id, "action": action,
        }
        if payload is not None:
            fields["signal_payload"] = payload
        return await self.request(SIGNAL, **fields)


def _with_reason(payload: Any, reason: str | None) -> Any:
    if payload is None and reason is not None:
        return {"reason": reason}
    return payload
