"""The history checker itself: each anomaly class is detected, and normal redelivery is not one."""

from __future__ import annotations

import itertools

import pytest

from tests.harness.checker import History

MEMBERS = {"alice": ["g"], "bob": ["g"], "carol": ["g", "d"]}


class Clock:
    """A clock the test moves by hand, so recovery times are exact."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def event(mailbox_seq: int | None, message_id: str, cmid: str, conversation_seq: int, conversation_id: str = "g") -> dict:
    message = {
        "message_id": message_id, "conversation_id": conversation_id, "conversation_seq": conversation_seq,
        "payload": History.payload(cmid),
    }
    return {"mailbox_seq": mailbox_seq, "kind": "message", "conversation_id": conversation_id, "message": message}


def sent_and_acked(
    history: History, count: int, sender: str = "alice", conversation_id: str = "g", first_seq: int = 1
) -> list[tuple[str, str, int]]:
    """`count` sends by `sender`, each ACKed: [(client_msg_id, message_id, conversation_seq)]."""
    out = []
    for seq in range(first_seq, first_seq + count):
        cmid, mid = f"{sender}-{conversation_id}-{seq}", f"m-{sender}-{conversation_id}-{seq}"
        history.sent(sender, conversation_id, cmid)
        history.acked(cmid, mid, seq)
        out.append((cmid, mid, seq))
    return out


def deliver(history: History, member: str, sends: list[tuple[str, str, int]], conversation_id: str = "g", first_mailbox_seq: int = 1) -> None:
    mailbox = itertools.count(first_mailbox_seq)
    for cmid, mid, seq in sends:
        history.observed(member, event(next(mailbox), mid, cmid, seq, conversation_id))


@pytest.fixture
def history() -> History:
    return History(clock=Clock())


def test_a_clean_history_with_redelivery_is_clean(history: History) -> None:
    sends = sent_and_acked(history, 5)
    deliver(history, "bob", sends)
    deliver(history, "bob", sends[3:], first_mailbox_seq=4)  # a SYNC overlapping the pushes
    deliver(history, "carol", sends)
    verdict = history.check(MEMBERS)
    verdict.assert_clean()
    assert verdict.ok_count == 10 and verdict.acked == 5
    assert verdict.members["bob"].redelivered == 2
    assert verdict.members["alice"].ok_count == 0  # the sender's own device is never handed it (§5)


def test_a_message_never_observed_is_lost(history: History) -> None:
    sends = sent_and_acked(history, 3)
    deliver(history, "bob", sends)
    deliver(history, "carol", sends[:2])
    verdict = history.check(MEMBERS)
    assert verdict.lost == 1 and verdict.members["carol"].lost == [sends[2][1]]
    with pytest.raises(AssertionError, match="carol lost 1"):
        verdict.assert_clean()


def test_a_message_whose_ack_was_lost_but_was_written_must_reach_everyone(history: History) -> None:
    history.sent("alice", "g", "c1")
    history.failed("c1", "connection lost")
    history.observed("bob", event(1, "m1", "c1", 1))
    verdict = history.check(MEMBERS)
    assert verdict.members["carol"].lost == ["m1"] and verdict.unexpected == 0
    assert [s.client_msg_id for s in history.unacked()] == ["c1"]


def test_one_message_under_two_mailbox_seqs_is_duplicated(history: History) -> None:
    sends = sent_and_acked(history, 2)
    deliver(history, "bob", sends)
    history.observed("bob", event(3, sends[1][1], sends[1][0], 2))
    verdict = history.check({"bob": ["g"]})
    assert verdict.members["bob"].duplicated == [sends[1][1]]
    assert verdict.reordered == 0  # the second copy is not also counted as a reorder


def test_one_message_under_two_conversation_seqs_is_duplicated(history: History) -> None:
    sends = sent_and_acked(history, 1)
    history.observed("bob", event(1, "m-alice-g-1", "alice-g-1", 1))
    history.observed("bob", event(None, "m-alice-g-1", "alice-g-1", 7))
    assert history.check({"bob": ["g"]}).members["bob"].duplicated == [sends[0][1]]


def test_a_client_msg_id_written_twice_is_a_duplicate_write(history: History) -> None:
    history.sent("alice", "g", "c1")
    history.acked("c1", "m1", 1)
    history.acked("c1", "m2", 2)  # a retry that was not recognised as one
    verdict = history.check({"bob": ["g"]})
    assert verdict.duplicate_writes == ["c1"] and verdict.duplicated >= 1
    assert not verdict.clean


def test_a_retry_observed_as_a_second_message_is_a_duplicate_write(history: History) -> None:
    history.sent("alice", "g", "c1")
    history.acked("c1", "m1", 1)
    history.observed("bob", event(1, "m1", "c1", 1))
    history.observed("bob", event(2, "m9", "c1", 2))
    verdict = history.check({"bob": ["g"]})
    assert verdict.duplicate_writes == ["c1"]
    assert "m9" in verdict.members["bob"].duplicated and "m9" in verdict.members["bob"].unexpected


def test_conversation_seqs_out_of_mailbox_order_are_reordered(history: History) -> None:
    sends = sent_and_acked(history, 3)
    history.observed("bob", event(1, sends[0][1], sends[0][0], 1))
    history.observed("bob", event(2, sends[2][1], sends[2][0], 3))
    history.observed("bob", event(3, sends[1][1], sends[1][0], 2))
    verdict = history.check({"bob": ["g"]})
    assert verdict.members["bob"].reordered == [sends[1][1]] and verdict.lost == 0


def test_arrival_order_does_not_matter_when_mailbox_order_is_right(history: History) -> None:
    sends = sent_and_acked(history, 3)
    for index in (2, 0, 1):  # a SYNC page arriving after later pushes, sorted by the client
        cmid, mid, seq = sends[index]
        history.observed("bob", event(seq, mid, cmid, seq))
    history.check({"bob": ["g"]}).assert_clean()


def test_reorder_is_per_conversation(history: History) -> None:
    group = sent_and_acked(history, 2, conversation_id="g")
    direct = sent_and_acked(history, 2, conversation_id="d")
    history.observed("carol", event(1, direct[0][1], direct[0][0], 1, "d"))
    history.observed("carol", event(2, group[0][1], group[0][0], 1))
    history.observed("carol", event(3, direct[1][1], direct[1][0], 2, "d"))
    history.observed("carol", event(4, group[1][1], group[1][0], 2))
    history.check({"carol": ["g", "d"]}).assert_clean()


def test_a_message_nobody_sent_is_unexpected(history: History) -> None:
    history.observed("bob", event(1, "m-ghost", "never-sent", 1))
    history.observed("bob", {"mailbox_seq": 2, "kind": "message", "message": {
        "message_id": "m-untagged", "conversation_id": "g", "conversation_seq": 2, "payload": {"text": "hi"}}})
    assert sorted(history.check({"bob": ["g"]}).members["bob"].unexpected) == ["m-ghost", "m-untagged"]


def test_a_message_differing_from_its_ack_is_unexpected(history: History) -> None:
    history.sent("alice", "g", "c1")
    history.acked("c1", "m1", 1)
    history.observed("bob", event(1, "m1", "c1", 5))  # ACKed as seq 1, delivered as seq 5
    assert history.check({"bob": ["g"]}).members["bob"].unexpected == ["m1"]


def test_a_message_outside_the_members_conversations_is_unexpected(history: History) -> None:
    sends = sent_and_acked(history, 1, conversation_id="d")
    history.observed("bob", event(1, sends[0][1], sends[0][0], 1, "d"))
    assert history.check({"bob": ["g"]}).members["bob"].unexpected == [sends[0][1]]


def test_a_refused_send_that_appears_is_unexpected(history: History) -> None:
    history.sent("alice", "g", "c1")
    history.refused("c1", "internal")
    history.observed("bob", event(1, "m1", "c1", 1))
    verdict = history.check({"bob": ["g"]})
    assert verdict.members["bob"].unexpected == ["m1"] and history.unacked() == []


def test_two_messages_under_one_mailbox_seq_are_unexpected(history: History) -> None:
    sends = sent_and_acked(history, 2)
    history.observed("bob", event(1, sends[0][1], sends[0][0], 1))
    history.observed("bob", event(1, sends[1][1], sends[1][0], 2))
    assert history.check({"bob": ["g"]}).members["bob"].unexpected == [sends[1][1]]


def test_control_events_are_not_messages(history: History) -> None:
    history.observed("bob", {"mailbox_seq": 1, "kind": "control", "control": {"custom_type": "qim.read.v1"}})
    assert history.observations == []


def test_recovery_time_runs_from_the_fault_to_the_last_member_caught_up(history: History) -> None:
    clock = history.clock
    assert isinstance(clock, Clock)
    early = sent_and_acked(history, 2)
    clock.now = 10.0
    history.fault()
    clock.now = 11.0
    late = sent_and_acked(history, 1, first_seq=3)  # sent after the fault: not part of catching up
    deliver(history, "bob", early + late)
    clock.now = 13.5
    deliver(history, "carol", early)
    verdict = history.check(MEMBERS)
    assert verdict.members["carol"].lost == [late[0][1]]  # lost, but not part of catching up
    assert verdict.recovery_time == pytest.approx(3.5)
    clock.now = 20.0
    deliver(history, "carol", late, first_mailbox_seq=3)
    verdict = history.check(MEMBERS)
    assert verdict.clean and verdict.recovery_time == pytest.approx(3.5)
    assert verdict.summary()["recovery_time_s"] == 3.5


def test_recovery_time_is_none_while_a_member_misses_a_message_from_before_the_fault(history: History) -> None:
    sends = sent_and_acked(history, 1)
    history.fault()
    deliver(history, "bob", sends)
    assert history.check(MEMBERS).recovery_time is None
    assert history.missing(MEMBERS) == 1


def test_after_healed_messages_sent_during_the_outage_count_too(history: History) -> None:
    clock = history.clock
    assert isinstance(clock, Clock)
    history.fault()
    clock.now = 2.0
    during = sent_and_acked(history, 1)  # refused while the database was away, ACKed after
    clock.now = 3.0
    history.healed()
    clock.now = 4.5
    deliver(history, "bob", during)
    deliver(history, "carol", during)
    verdict = history.check(MEMBERS)
    assert verdict.clean and verdict.recovery_time == pytest.approx(4.5)
