"""qim.notify in process: what a DB-thread call commits is pushed by the loop when it returns,
including the pushes committed before it failed, never the rolled-back ones."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from qim.errors import Refused
from qim.notify import UserPush, collecting_pushes, push_on_commit

pytestmark = pytest.mark.django_db(transaction=True)


def push(text: str) -> UserPush:
    return UserPush(tenant_id=1, user_ids=["alice"], text=text)


def test_a_call_hands_back_its_committed_pushes_in_order_and_its_result() -> None:
    def work() -> int:
        for text in ("one", "two"):
            with transaction.atomic():
                push_on_commit(push(text))
        return 7

    collected = collecting_pushes(work)()
    assert [p.text for p in collected.pushes] == ["one", "two"]
    assert collected.unwrap() == 7


def test_pushes_committed_before_a_failure_still_go_out_and_the_failure_is_raised_after() -> None:
    def work() -> None:
        with transaction.atomic():
            push_on_commit(push("committed"))
        with transaction.atomic():
            push_on_commit(push("rolled back"))
            raise Refused("conflict", "the second step failed")

    collected = collecting_pushes(work)()
    assert [p.text for p in collected.pushes] == ["committed"]
    with pytest.raises(Refused) as raised:
        collected.unwrap()
    assert raised.value.code == "conflict"


def test_collection_is_per_thread_and_ends_with_the_call() -> None:
    """Another thread's commits (a DRF view, say) are not taken by this call's collector."""
    seen_elsewhere: list[bool] = []

    def elsewhere() -> None:
        from qim import notify

        seen_elsewhere.append(getattr(notify._collected, "pushes", None) is None)

    def work() -> None:
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()

    assert collecting_pushes(work)().pushes == []
    assert seen_elsewhere == [True]
    from qim import notify

    assert getattr(notify._collected, "pushes", None) is None
