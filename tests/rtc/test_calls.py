"""The call store contract, on both implementations: the in-process one and Redis (real)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from rtc.calls import (
    ACCEPTED,
    BUSY,
    ENDED,
    MISSED,
    RINGING,
    Call,
    CallStore,
    MemoryCallStore,
    RedisCallStore,
)

NOW = 1_800_000_000_000
STORE_DB = 63  # conftest's deployments count their Redis databases up from 1


def a_call(call_id: str = "c1", caller: str = "alice", callee: str = "bob", deadline: int = NOW + 60_000) -> Call:
    return Call(
        tenant_id=1, call_id=call_id, conversation_id="conv", caller_id=caller, caller_device_id="phone",
        callee_id=callee, state=RINGING, created_at_ms=NOW, ring_deadline_ms=deadline, node_id="n1",
    )


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[CallStore]:
    if request.param == "memory":
        yield MemoryCallStore()
        return
    proc = request.getfixturevalue("redis_proc")
    client = aioredis.from_url(f"redis://{proc.host}:{proc.port}/{STORE_DB}", decode_responses=True)
    await client.flushdb()
    yield RedisCallStore(lambda: client)
    await client.flushdb()
    await client.aclose()


async def test_create_is_once_per_call_id_and_reads_back(store: CallStore) -> None:
    call = a_call()
    assert await store.create(call, NOW) == call
    assert await store.create(replace(call, caller_id="carol"), NOW) is None
    assert await store.get(1, "c1") == call
    assert await store.get(2, "c1") is None


async def test_a_callee_in_an_active_call_makes_the_next_invite_busy(store: CallStore) -> None:
    first = await store.create(a_call("c1"), NOW)
    busy = await store.create(a_call("c2", caller="carol"), NOW)
    assert busy is not None and (busy.state, busy.outcome) == (ENDED, BUSY)
    accepted = await store.transition(first, ACCEPTED, {"callee_device_id": "tablet", "accepted_at_ms": NOW})
    assert accepted is not None and accepted.callee_device_id == "tablet"
    # The caller of an active call is busy too.
    assert (await store.create(a_call("c3", caller="carol", callee="alice"), NOW)).state == ENDED
    await store.transition(accepted, ENDED, {"outcome": "completed", "ended_at_ms": NOW})
    assert (await store.create(a_call("c4", caller="carol"), NOW)).state == RINGING


async def test_a_ringing_call_past_its_deadline_no_longer_makes_anyone_busy(store: CallStore) -> None:
    await store.create(a_call("c1", deadline=NOW + 1000), NOW)
    assert (await store.create(a_call("c2", caller="carol"), NOW + 1000)).state == RINGING
    assert await store.due_ringing(NOW + 1001, 10) == [(1, "c1")]


async def test_transitions_are_compare_and_set(store: CallStore) -> None:
    call = await store.create(a_call(deadline=NOW + 1000), NOW)
    assert await store.transition(call, ACCEPTED, {"callee_device_id": "x"}, ringing_until_ms=NOW + 1000) is None
    results = await asyncio.gather(
        store.transition(call, ACCEPTED, {"callee_device_id": "phone"}),
        store.transition(call, ENDED, {"outcome": MISSED}),
    )
    assert sum(r is not None for r in results) == 1
    winner = next(r for r in results if r is not None)
    assert await store.get(1, call.call_id) == winner
    assert await store.due_ringing(NOW + 10_000, 10) == []
