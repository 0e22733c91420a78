"""A Jepsen-style history checker: what was sent, ACKed and observed, classified per member.

Fault tests record every SEND (with its `client_msg_id`), every ACK, every send whose outcome
is unknown, and every message each member is handed (EVENT push or SYNC_BATCH, before and
after reconnects); `History.check(members)` then classifies each ACKed `message_id` for each
member who should see it. The rules, so that every fault test means the same by them:

* **Transport redelivery is not an anomaly.** Delivery is at-least-once: after a reconnect a
  SYNC may hand over events already pushed. A client dedupes by `mailbox_seq`, so the same
  `(mailbox_seq, message_id)` seen twice counts once (`redelivered`, for information).
* **lost**: a message ACKed to its sender (or observed by anyone, its ACK having been lost
  with the connection) in a conversation the member belongs to, never observed by that member.
  A member never expects its own sends: §5 does not deliver an event to its origin device.
* **duplicated**: one `message_id` observed under two different `mailbox_seq` or two different
  `conversation_seq` (the server wrote or delivered it twice); one `client_msg_id` that became
  two `message_id`s (ACKed twice differently, or observed as two messages: a retry that wrote
  twice). Duplicate writes are counted for every member that observes them, and once globally.
* **reordered**: for one member and one conversation, the deduped observations taken in
  `mailbox_seq` order must have strictly ascending `conversation_seq`; each one that does not
  is counted (observations without a `mailbox_seq` are taken in arrival order).
* **unexpected**: an observed message nobody sent (no known `client_msg_id` tag in its
  payload), a message whose conversation, `conversation_seq` or `message_id` differs from its
  ACK, one in a conversation the member is not in, one whose send was definitely refused
  (ERROR: §4 says a refused request leaves no side effect), or two different messages under
  one `mailbox_seq`.

Payloads carry their `client_msg_id` (`History.payload`), so an observed message can be tied to
its send even when its ACK never arrived. `recovery_time` measures from `fault()` to the moment
every member had observed every message (it should see) whose send began before the fault, or
before `healed()` when the test repairs the fault itself (a database started again).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TAG = "chk:"


@dataclass
class Send:
    """One logical send: a `client_msg_id`, retried as often as needed, and what came of it."""

    sender: str
    conversation_id: str
    client_msg_id: str
    started_at: float
    acks: list[tuple[str, int | None]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    refused: str | None = None
    acked_at: float | None = None


@dataclass
class Observation:
    member: str
    mailbox_seq: int | None
    message_id: str
    conversation_id: str
    conversation_seq: int | None
    client_msg_id: str | None
    at: float


@dataclass
class MemberVerdict:
    """One member's anomalies, each a list of message ids (with duplicates once per id)."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    ok_count: int = 0
    redelivered: int = 0
    caught_up_at: float | None = None


@dataclass
class Verdict:
    """Every member's verdict plus the global duplicate writes; totals as properties."""

    members: dict[str, MemberVerdict]
    duplicate_writes: list[str]
    acked: int
    recovery_time: float | None

    def _total(self, name: str) -> int:
        return sum(len(getattr(member, name)) for member in self.members.values())

    @property
    def lost(self) -> int:
        return self._total("lost")

    @property
    def duplicated(self) -> int:
        return self._total("duplicated") + len(self.duplicate_writes)

    @property
    def reordered(self) -> int:
        return self._total("reordered")

    @property
    def unexpected(self) -> int:
        return self._total("unexpected")

    @property
    def ok_count(self) -> int:
        return sum(member.ok_count for member in self.members.values())

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.unexpected)

    def summary(self) -> dict[str, Any]:
        """Counts only, for a JSON report or a failure message."""
        return {
            "acked": self.acked, "ok": self.ok_count, "lost": self.lost, "duplicated": self.duplicated,
            "reordered": self.reordered, "unexpected": self.unexpected,
            "redelivered": sum(m.redelivered for m in self.members.values()),
            "recovery_time_s": None if self.recovery_time is None else round(self.recovery_time, 3),
        }

    def describe(self) -> str:
        """Summary plus, per member, the first few ids of each anomaly."""
        lines = [str(self.summary())]
        if self.duplicate_writes:
            lines.append(f"duplicate writes (client_msg_id): {self.duplicate_writes[:10]}")
        for name, member in sorted(self.members.items()):
            for kind in ("lost", "duplicated", "reordered", "unexpected"):
                ids = getattr(member, kind)
                if ids:
                    lines.append(f"{name} {kind} {len(ids)}: {ids[:10]}")
        return "\n".join(lines)

    def assert_clean(self) -> None:
        assert self.clean, "history anomalies:\n" + self.describe()


class History:
    """The record of one fault test's traffic; safe to call from one asyncio loop."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.sends: dict[str, Send] = {}
        self.observations: list[Observation] = []
        self.fault_at: float | None = None
        self.healed_at: float | None = None

    # Recording

    @staticmethod
    def payload(client_msg_id: str) -> dict[str, str]:
        """The text payload a checked SEND carries, so observers can tie it to its send."""
        return {"text": f"{TAG}{client_msg_id}"}

    def sent(self, sender: str, conversation_id: str, client_msg_id: str) -> None:
        """A SEND (first try or retry) left `sender`; only the first one starts the clock."""
        if client_msg_id not in self.sends:
            self.sends[client_msg_id] = Send(sender, conversation_id, client_msg_id, self.clock())

    def acked(self, client_msg_id: str, message_id: str, conversation_seq: int | None) -> None:
        send = self.sends[client_msg_id]
        send.acks.append((message_id, conversation_seq))
        send.acked_at = self.clock() if send.acked_at is None else send.acked_at

    def failed(self, client_msg_id: str, reason: str = "") -> None:
        """Outcome unknown (the socket dropped, no reply in time): it may or may not be written."""
        self.sends[client_msg_id].failures.append(reason)

    def refused(self, client_msg_id: str, code: str) -> None:
        """The server answered ERROR and the sender gave up on it: it must never appear."""
        self.sends[client_msg_id].refused = code

    def observed(self, member: str, event: Mapping[str, Any]) -> None:
        """A mailbox event (or a bare message object) handed to `member`; others are ignored."""
        message = event.get("message") if "mailbox_seq" in event else event
        if not isinstance(message, Mapping) or "message_id" not in message:
            return
        if event.get("kind", "message") != "message":
            return
        self.observations.append(Observation(
            member=member, mailbox_seq=event.get("mailbox_seq"), message_id=str(message["message_id"]),
            conversation_id=str(message.get("conversation_id")), conversation_seq=message.get("conversation_seq"),
            client_msg_id=_tag_of(message.get("payload")), at=self.clock(),
        ))

    def fault(self) -> None:
        """Now is the fault instant `recovery_time` counts from."""
        self.fault_at = self.clock()

    def healed(self) -> None:
        """Now the fault is repaired (a stopped service started again): messages sent until now,
        not only until the fault, count in `recovery_time`. Without it, the fault instant."""
        self.healed_at = self.clock()

    # Reading

    def unacked(self) -> list[Send]:
        """Sends with no ACK and no definite refusal yet: the ones a sender must retry."""
        return [s for s in self.sends.values() if not s.acks and s.refused is None]

    def written(self) -> dict[str, Send]:
        """message_id -> send, for every message known to exist: ACKed, or observed by anyone."""
        out = {mid: send for send in self.sends.values() for mid, _ in send.acks}
        for seen in self.observations:
            send = self.sends.get(seen.client_msg_id or "")
            if send is not None and seen.message_id not in out and not send.acks and send.refused is None:
                out[seen.message_id] = send
        return out

    def missing(self, members: Mapping[str, Iterable[str]]) -> int:
        """How many (member, written message) pairs are not observed yet: 0 when caught up."""
        return sum(len(v.lost) for v in self.check(members).members.values())

    # Checking

    def check(self, members: Mapping[str, Iterable[str]]) -> Verdict:
        """Classify, for each member (-> the conversation ids it should see), every message."""
        written = self.written()
        duplicate_writes = self._duplicate_writes()
        verdicts = {
            member: self._check_member(member, set(conversations), written, duplicate_writes)
            for member, conversations in members.items()
        }
        acked = sum(1 for send in self.sends.values() if send.acks)
        return Verdict(verdicts, sorted(duplicate_writes), acked, self._recovery(verdicts))

    def _duplicate_writes(self) -> set[str]:
        ids: dict[str, set[str]] = defaultdict(set)
        for send in self.sends.values():
            ids[send.client_msg_id].update(mid for mid, _ in send.acks)
        for seen in self.observations:
            if seen.client_msg_id in self.sends:
                ids[seen.client_msg_id].add(seen.message_id)
        return {cmid for cmid, mids in ids.items() if len(mids) > 1}

    def _check_member(
        self, member: str, conversations: set[str], written: dict[str, Send], duplicate_writes: set[str]
    ) -> MemberVerdict:
        verdict = MemberVerdict()
        seen = self._dedupe(member, verdict)
        first_seen: dict[str, float] = {}
        for obs in seen:
            first_seen.setdefault(obs.message_id, obs.at)
            if self._unexpected(obs, conversations, written):
                verdict.unexpected.append(obs.message_id)
        verdict.duplicated.extend(_duplicated(seen))
        verdict.duplicated.extend(
            obs.message_id for obs in seen if obs.client_msg_id in duplicate_writes
        )
        verdict.reordered.extend(_reordered(seen))
        expected = {
            mid for mid, send in written.items() if send.conversation_id in conversations and send.sender != member
        }
        verdict.lost.extend(sorted(expected - set(first_seen)))
        bad = set(verdict.unexpected) | set(verdict.duplicated) | set(verdict.reordered)
        verdict.ok_count = len((expected & set(first_seen)) - bad)
        verdict.caught_up_at = self._caught_up(expected, written, first_seen)
        return verdict

    def _dedupe(self, member: str, verdict: MemberVerdict) -> list[Observation]:
        """The member's observations, a redelivered (mailbox_seq, message_id) once; a mailbox_seq
        reused for another message is unexpected."""
        by_seq: dict[int, Observation] = {}
        out = []
        for obs in self.observations:
            if obs.member != member:
                continue
            if obs.mailbox_seq is None:
                out.append(obs)
                continue
            earlier = by_seq.get(obs.mailbox_seq)
            if earlier is None:
                by_seq[obs.mailbox_seq] = obs
                out.append(obs)
            elif earlier.message_id == obs.message_id:
                verdict.redelivered += 1
            else:
                verdict.unexpected.append(obs.message_id)
        return sorted(out, key=lambda o: (o.mailbox_seq is None, o.mailbox_seq or 0))

    def _unexpected(self, obs: Observation, conversations: set[str], written: dict[str, Send]) -> bool:
        send = self.sends.get(obs.client_msg_id or "")
        if send is None or send.refused is not None or obs.conversation_id not in conversations:
            return True
        if obs.conversation_id != send.conversation_id:
            return True
        acks = dict(send.acks)
        if acks and (obs.message_id not in acks or acks[obs.message_id] != obs.conversation_seq):
            return True
        return obs.message_id not in written

    def _caught_up(self, expected: set[str], written: dict[str, Send], first_seen: dict[str, float]) -> float | None:
        if self.fault_at is None:
            return None
        cutoff = self.fault_at if self.healed_at is None else max(self.fault_at, self.healed_at)
        before = [mid for mid in expected if written[mid].started_at <= cutoff]
        if any(mid not in first_seen for mid in before):
            return None
        return max((first_seen[mid] for mid in before), default=self.fault_at)

    def _recovery(self, verdicts: dict[str, MemberVerdict]) -> float | None:
        if self.fault_at is None or any(v.caught_up_at is None for v in verdicts.values()):
            return None
        ends = [v.caught_up_at for v in verdicts.values() if v.caught_up_at is not None]
        return max(0.0, max(ends, default=self.fault_at) - self.fault_at)


def _tag_of(payload: Any) -> str | None:
    text = payload.get("text") if isinstance(payload, Mapping) else None
    if isinstance(text, str) and text.startswith(TAG):
        return text[len(TAG):]
    return None


def _duplicated(seen: list[Observation]) -> list[str]:
    """message_ids observed under two mailbox_seqs or two conversation_seqs."""
    seqs: dict[str, set[tuple[str, Any]]] = defaultdict(set)
    for obs in seen:
        seqs[obs.message_id].add(("conversation_seq", obs.conversation_seq))
        if obs.mailbox_seq is not None:
            seqs[obs.message_id].add(("mailbox_seq", obs.mailbox_seq))
    return [
        mid for mid, pairs in seqs.items()
        if len({v for k, v in pairs if k == "conversation_seq"}) > 1
        or len({v for k, v in pairs if k == "mailbox_seq"}) > 1
    ]


def _reordered(seen: list[Observation]) -> list[str]:
    """Per conversation, each observation whose conversation_seq is not above every earlier one."""
    highest: dict[str, int] = {}
    out = []
    counted: set[str] = set()
    for obs in seen:
        if obs.conversation_seq is None or obs.message_id in counted:
            continue  # a second copy of one message is a duplicate, not also a reorder
        counted.add(obs.message_id)
        top = highest.get(obs.conversation_id)
        if top is not None and obs.conversation_seq <= top:
            out.append(obs.message_id)
        else:
            highest[obs.conversation_id] = obs.conversation_seq
    return out
