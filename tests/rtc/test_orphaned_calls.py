"""An accepted call whose callee's node dies (SIGKILL) mid-call, on two nodes: the grace that
node would have run dies with it, so the sweep of accepted calls (rtc/departures.py
OrphanedCalls) on the caller's node ends the call once the presence directory no longer shows
the device and rtc_disconnect_grace_s has passed: a hangup to the caller, one record, and both
users free, instead of busy until the record expires (3 h)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qim.node.connection_node import ConnectionNode
from qim.node.presence import MemoryPresenceDirectory
from rtc.calls import ACCEPTED, ENDED, RINGING, Call, MemoryCallStore
from rtc.departures import CallDepartures, OrphanedCalls
from tests.conftest import QimDeployment, start_cluster
from tests.rtc.rtc_helpers import call_records, direct, new_call_id, next_signal, record_rows, rtc_pushes, signal

# The dead node's presence entries go 1.5 s after its last heartbeat; a device then counts as
# gone after 1 s more.
ENV = {"QIM_PRESENCE_TTL_S": "1.5", "QIM_RTC_DISCONNECT_GRACE_S": "1"}


@pytest.fixture
def short_presence_cluster(postgres, pg_template, redis_proc, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


async def test_an_accepted_call_whose_callee_node_dies_is_ended_by_the_sweep(
    short_presence_cluster: QimDeployment,
) -> None:
    n1, n2 = short_presence_cluster.nodes
    tenant = short_presence_cluster.tenants["acme"]
    alice, bob, carol, dave = (tenant.persona(n) for n in ("alice", "bob", "carol", "dave"))
    try:
        conversation = direct(alice, bob)
        a, b = await alice.connect(n1), await bob.connect(n2)
        call = new_call_id()
        await signal(a, conversation, bob, call, "invite")
        assert (await next_signal(b))["action"] == "invite"
        calling = time.monotonic()  # before the accept: the call's duration starts after this
        assert (await signal(b, conversation, alice, call, "accept"))["state"] == "accepted"
        assert (await next_signal(a))["action"] == "accept"
        await asyncio.sleep(3)
        assert rtc_pushes(a) == []  # both devices online: the sweep leaves a live call alone

        n2.kill()  # bob's node, and the grace it would have run for bob's phone
        hangup = await next_signal(a, timeout=60)
        hung_up = time.monotonic()
        assert (hangup["action"], hangup["from_user_id"], hangup["from_device_id"]) == ("hangup", bob.user_id, None)
        assert hangup["call_id"] == call and hangup["signal_payload"] == {"reason": "disconnected"}
        (record,) = await call_records(a, conversation)
        # From the accept to when the sweep saw bob's device gone: before the hangup came.
        assert record["payload"]["outcome"] == "completed"
        assert 3 <= record["payload"]["duration_s"] <= round(hung_up - calling), (record, hung_up - calling)
        assert record_rows(short_presence_cluster, call) == 1

        # Neither is busy: alice calls carol, and dave reaches bob (ringing, pushed: offline).
        c = await carol.connect(n1)
        assert (await signal(a, direct(alice, carol), carol, new_call_id(), "invite"))["state"] == "ringing"
        assert (await next_signal(c))["action"] == "invite"
        d = await dave.connect(n1)
        assert (await signal(d, direct(dave, bob), bob, new_call_id(), "invite"))["state"] == "ringing"
        await asyncio.sleep(1.5)
        assert rtc_pushes(a) == [] and record_rows(short_presence_cluster, call) == 1
    finally:
        await tenant.close_clients()


async def test_the_sweep_waits_out_the_grace_and_forgets_calls_that_ended() -> None:
    """OrphanedCalls in process, on the real in-memory store and directory, with its clock
    stepped: a device gone for less than the grace is left alone, one gone for the grace is
    ended from when the sweep first saw it gone, and nothing is remembered of a call that is
    no longer accepted (a long-running node must not grow with every call)."""
    clock = [1_000_000]
    store, node = MemoryCallStore(clock=lambda: clock[0]), ConnectionNode("n1", MemoryPresenceDirectory())
    ended: list[tuple] = []

    async def end(*args) -> bool:  # type: ignore[no-untyped-def]
        ended.append(args)
        return True

    sweep = OrphanedCalls(end, lambda: store, lambda: node, clock=lambda: clock[0])
    ringing = Call(tenant_id=1, call_id="c1", conversation_id="conv", caller_id="alice", caller_device_id="phone",
                   callee_id="bob", state=RINGING, created_at_ms=clock[0], ring_deadline_ms=clock[0] + 60_000)
    await store.create(ringing, clock[0])
    call = await store.transition(ringing, ACCEPTED, {"callee_device_id": "tablet", "accepted_at_ms": clock[0]})
    assert call is not None
    await node.directory.add("n1", (1, "alice"), "phone")  # bob's tablet is on no node

    grace_ms = int(CallDepartures.grace_s() * 1000)
    first_seen = clock[0]
    assert await sweep.sweep_once() == 0
    clock[0] += grace_ms - 1
    assert await sweep.sweep_once() == 0 and ended == []
    clock[0] += 1
    assert await sweep.sweep_once() == 1
    assert ended == [(1, "c1", "bob", "tablet", first_seen)]

    await store.transition(call, ENDED, {"outcome": "completed"})
    await sweep.sweep_once()
    assert sweep._gone_since == {}
