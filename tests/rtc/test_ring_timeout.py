"""The server's ring timeout (shortened to 1 s): `timeout` to both sides and a missed record
that counts unread; also when the node that ran the timer dies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment, start_cluster
from tests.rtc.conftest import start_either
from tests.core.test_offline_push import push_tasks, register_push
from tests.rtc.rtc_helpers import call_records, direct, new_call_id, next_signal, record_rows, signal, unread_of

SHORT_RING = {"QIM_RTC_RING_TIMEOUT_S": "1"}


@pytest.fixture(params=["embedded", "cluster"])
def short_ring(request: pytest.FixtureRequest, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_either(request, work_dir, SHORT_RING)
    yield deployment
    deployment.stop()


async def test_an_unanswered_call_times_out_for_both_and_is_a_missed_call_that_counts(
    short_ring: QimDeployment,
) -> None:
    tenant = short_ring.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    conversation = direct(alice, bob)
    # An offline device with credentials: the missed record (written by the ring timer) queues
    # it a message push, which asks the presence directory from the timer's thread.
    register_push(bob, "watch")
    try:
        a = await alice.connect(short_ring.nodes[0])
        phone = await bob.connect(short_ring.nodes[-1], device_id="phone")
        tablet = await bob.connect(short_ring.nodes[0], device_id="tablet")
        call = new_call_id()
        started, asked_ms = time.monotonic(), time.time() * 1000
        ack = await signal(a, conversation, bob, call, "invite")
        # The server set the deadline 1 s after it took the invite, between the ask and the ACK.
        assert asked_ms + 1000 - 1 <= ack["ring_deadline_ms"] <= time.time() * 1000 + 1000 + 1
        for client in (phone, tablet):
            assert (await next_signal(client))["action"] == "invite"

        for client in (a, phone, tablet):
            timeout = await next_signal(client, timeout=60)
            assert (timeout["action"], timeout["call_id"], timeout["from_device_id"]) == ("timeout", call, None)
            assert timeout["signal_payload"] == {"ring_deadline_ms": ack["ring_deadline_ms"]}
        assert time.monotonic() - started >= 0.9  # not before the deadline (however late)

        with pytest.raises(QimError) as late:
            await signal(phone, conversation, alice, call, "accept")
        assert late.value.code == "conflict"
        (record,) = await call_records(phone, conversation)
        assert record["payload"]["outcome"] == "missed" and record_rows(short_ring, call) == 1
        assert await unread_of(phone, conversation) == 1
        assert await unread_of(a, conversation) == 0
        assert push_tasks(short_ring, bob, "watch") == 1
    finally:
        await tenant.close_clients()


async def test_a_ringing_call_whose_node_died_still_ends_as_missed(
    postgres, pg_template, redis_proc, work_dir: Path,  # type: ignore[no-untyped-def]
) -> None:
    """The invite's node is killed: the callee's node acts on the expired call lazily (an
    accept after the deadline) or, left alone, its sweep finishes the call."""
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env=SHORT_RING)
    tenant = deployment.tenants["acme"]
    n1, n2 = deployment.nodes
    try:
        alice, bob = tenant.persona("alice"), tenant.persona("bob")
        conversation = direct(alice, bob)
        b = await bob.connect(n2)

        lazy, swept = new_call_id(), new_call_id()
        for call in (lazy, swept):
            a = await alice.connect(n1, device_id=f"dev-{call}")
            await signal(a, conversation, bob, call, "invite")
            assert (await next_signal(b))["call_id"] == call
            n1.kill()
            if call == lazy:
                await asyncio.sleep(1.2)  # past the deadline, before the sweep's grace ends
                with pytest.raises(QimError) as late:
                    await signal(b, conversation, alice, call, "accept")
                assert late.value.code == "conflict" and "missed" in late.value.message
            timeout = await next_signal(b, timeout=60)
            assert (timeout["action"], timeout["call_id"]) == ("timeout", call)
            assert record_rows(deployment, call) == 1
            if call == lazy:
                n1.start()
        outcomes = {r["payload"]["call_id"]: r["payload"]["outcome"] for r in await call_records(b, conversation)}
        assert outcomes == {lazy: "missed", swept: "missed"}
    finally:
        await tenant.close_clients()
        deployment.stop()
