"""What each room member saw, classified per room and epoch (issue #17 item 5): room events
have no persistence, so the rules are those of design §1: order by room_seq ascending always
(never an older epoch's event after a newer one's), one writer per epoch (a room_seq names one
message), and within the current epoch nothing acknowledged is lost once the member has
replayed (the ring is what heals a dropped push); an older epoch's events may vanish only
through the epoch change."""

from __future__ import annotations

from dataclasses import dataclass, field

from qimclient import QimClient, QimError
from tests.rooms.room_helpers import EPOCH_SHIFT, epoch_of


@dataclass
class RoomMember:
    """Every room event one client got, pushes and replies, in arrival order."""

    name: str
    client: QimClient
    room_id: str
    seen: list[tuple[int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client.on_push("ROOM_BATCH", self.record)

    def record(self, frame: dict) -> None:
        if frame.get("room_id") == self.room_id:
            self.seen += [(event["room_seq"], event["message_id"]) for event in frame["events"]]

    async def replayed(self, epoch: int) -> list[tuple[int, str]]:
        """The ring of `epoch` as the writer holds it now (not recorded as seen: a replay
        fills gaps, it is not the live order)."""
        events, after = [], epoch << EPOCH_SHIFT
        while True:
            batch = await self.client.request("ROOM_REPLAY", room_id=self.room_id, after_room_seq=after)
            if batch["room_epoch"] != epoch:
                return events
            events += [(event["room_seq"], event["message_id"]) for event in batch["events"]]
            if not batch.get("has_more") or not batch["events"]:
                return events
            after = batch["events"][-1]["room_seq"]


@dataclass
class RoomAcks:
    """Every ACKed ROOM_SEND (room_seq -> message_id) and every ERROR code, by sender."""

    acked: dict[int, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duplicate_seqs: list[int] = field(default_factory=list)

    async def send(self, client: QimClient, room_id: str, text: str) -> dict | None:
        try:
            ack = await client.request("ROOM_SEND", room_id=room_id, content_type="text", payload={"text": text})
        except QimError as error:
            self.errors.append(error.code)
            return None
        if ack["room_seq"] in self.acked:
            self.duplicate_seqs.append(ack["room_seq"])
        self.acked[ack["room_seq"]] = ack["message_id"]
        return ack


@dataclass
class Verdict:
    reordered: int
    two_writers: list[int]
    lost_in_current_epoch: list[int]
    vanished_with_old_epochs: int

    def assert_clean(self) -> None:
        assert self.reordered == 0, "a member saw room_seq go backwards (an old epoch after a new one?)"
        assert not self.two_writers, f"two messages under one room_seq: two writers in one epoch {self.two_writers[:5]}"
        assert not self.lost_in_current_epoch, f"acknowledged and lost within the epoch: {self.lost_in_current_epoch[:5]}"


async def classify(member: RoomMember, acks: RoomAcks, current_epoch: int) -> Verdict:
    seqs = [seq for seq, _ in member.seen]
    reordered = sum(1 for a, b in zip(seqs, seqs[1:]) if b <= a)
    healed = dict(member.seen)
    two_writers = [seq for seq, mid in member.seen if acks.acked.get(seq, mid) != mid]
    replay = await member.replayed(current_epoch)
    two_writers += [seq for seq, mid in replay if acks.acked.get(seq, mid) != mid or healed.get(seq, mid) != mid]
    healed.update(replay)
    current = [seq for seq in acks.acked if epoch_of(seq) == current_epoch]
    older = [seq for seq in acks.acked if epoch_of(seq) < current_epoch]
    return Verdict(
        reordered=reordered,
        two_writers=two_writers + acks.duplicate_seqs,
        lost_in_current_epoch=sorted(seq for seq in current if seq not in healed),
        vanished_with_old_epochs=sum(1 for seq in older if seq not in healed),
    )
