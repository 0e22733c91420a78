"""The timing wheel behind daphne's timeout checker (qim/server/daphne_timers.py): a check is
never taken before its due moment, at most a slot (1 s) after it, each filing once; a protocol
filed into a second already past is taken at the next tick; a collected protocol leaves
nothing alive; a wall clock that went back an hour files from the new time on. The real sockets' heartbeats
through it are in test_heartbeat.py and test_keepalive.py."""

from __future__ import annotations

import gc
import random

from qim.server.daphne_timers import ConnectionTimers


class Protocol:
    """Anything weak-referenceable stands for a daphne protocol here."""


def taken(timers: ConnectionTimers, now: float) -> list[Protocol]:
    return [p for p in (entry() for entry in timers.take_due(now)) if p is not None]


def test_each_check_is_taken_once_never_early_and_within_a_slot() -> None:
    timers, rng = ConnectionTimers(), random.Random(7)
    protocols = [Protocol() for _ in range(500)]
    due = {id(p): 1000.0 + rng.uniform(0, 30) for p in protocols}
    for p in protocols:
        timers.schedule(p, due[id(p)])
    seen: dict[int, float] = {}
    now = 999.3
    while now < 1040:
        for p in taken(timers, now):
            assert id(p) not in seen, "a filing was taken twice"
            assert now >= due[id(p)], "a check was taken before it was due"
            assert now - due[id(p)] < 2.0, "a check was taken more than a slot late"
            seen[id(p)] = now
        now += rng.uniform(0.2, 1.0)
    assert len(seen) == len(protocols)


def test_a_filing_into_a_past_second_is_taken_at_the_next_tick() -> None:
    timers, p = ConnectionTimers(), Protocol()
    timers.schedule(Protocol(), 100.0)
    assert taken(timers, 100.5) == []  # the other one was collected: nothing alive is kept
    timers.schedule(p, 99.0)  # due in the past (a slow tick): taken at the next one
    assert taken(timers, 100.9) == [p]
    assert taken(timers, 101.9) == []


def test_a_collected_protocol_is_not_kept_alive() -> None:
    timers, p = ConnectionTimers(), Protocol()
    timers.schedule(p, 10.0)
    del p
    gc.collect()
    assert taken(timers, 11.0) == []


def test_a_clock_that_went_back_files_from_the_new_time() -> None:
    timers, p = ConnectionTimers(), Protocol()
    timers.schedule(Protocol(), 5000.0)
    taken(timers, 5000.0)
    timers.schedule(p, 1001.0)  # the clock went back an hour before this filing
    assert taken(timers, 1000.5) == []
    assert taken(timers, 1001.2) == [p]
