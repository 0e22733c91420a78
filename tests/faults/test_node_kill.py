"""kill -9 one of two nodes mid-traffic: its clients fail over to the other node and SYNC, senders
retry un-ACKed SENDs with the same client_msg_id, and the checker finds nothing lost,
duplicated, reordered or unexpected for any member."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group
from tests.faults.reports import record_result
from tests.harness.checker import History
from tests.harness.personas import api_ok
from tests.harness.traffic import Device, retry_unacked, send_steadily, wait_until

pytestmark = pytest.mark.faults

PEOPLE = 6
SENDS_EACH = 24
# Generous: daphne processes and clients share a loaded 2-core machine.
PATIENCE_S = 60


@pytest.fixture(scope="module")
def kill_cluster(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(
        postgres, pg_template, redis_proc, work_dir, extra_env={"QIM_PER_USER_MSG_RATE": "1000"}
    )
    yield deployment
    deployment.stop()


def direct(owner, other) -> str:  # type: ignore[no-untyped-def]
    answer = api_ok(
        owner.tenant.node, "POST", "conversations", owner.token(),
        json={"kind": "direct", "member_user_ids": [owner.user_id, other.user_id]},
    )
    return answer["conversation_id"]


async def test_a_node_killed_mid_traffic_loses_nothing(kill_cluster: QimDeployment) -> None:
    n1, n2 = kill_cluster.nodes
    tenant = kill_cluster.tenants["acme"]
    people = [tenant.persona(f"p{i}") for i in range(PEOPLE)]
    group = create_group(people[0], *people[1:])
    # Pairs (0,1), (2,3), (4,5) each have a DM whose two ends sit on different nodes.
    dms = {i: direct(people[i - i % 2], people[i - i % 2 + 1]) for i in range(PEOPLE)}
    members = {f"p{i}": [group, dms[i]] for i in range(PEOPLE)}
    history = History()
    # Even people live on node 1 (the one killed), odd ones on node 2; both fail over.
    devices = [
        await Device.open(f"p{i}", people[i], [n1, n2] if i % 2 == 0 else [n2, n1], history)
        for i in range(PEOPLE)
    ]
    try:
        deadline = time.monotonic() + PATIENCE_S
        traffic = [
            asyncio.create_task(send_steadily(d, [group, dms[i]], SENDS_EACH, 0.05, deadline))
            for i, d in enumerate(devices)
        ]
        await wait_until(lambda: sum(1 for s in history.sends.values() if s.acks) >= PEOPLE * SENDS_EACH // 3,
                         PATIENCE_S, "a third of the traffic ACKed")
        history.fault()
        n1.kill()
        await asyncio.gather(*traffic)
        await retry_unacked(devices, history, deadline)
        assert history.unacked() == []
        await wait_until(lambda: history.missing(members) == 0, PATIENCE_S, "every member caught up",
                         describe=lambda: history.check(members).describe())
        verdict = history.check(members)
        moved = sum(d.client.node_changes > 0 for d in devices[::2])

        # Node 1 comes back; a new device of p0 there SYNCs everything from the start.
        n1.start()
        late = await Device.open("p0-tablet", people[0], [n1], history, device_id="tablet")
        devices.append(late)
        members_after = {**members, "p0-tablet": [group, dms[0]]}
        await wait_until(lambda: history.missing(members_after) == 0, PATIENCE_S, "the late device caught up",
                         describe=lambda: history.check(members_after).describe())
        final = history.check(members_after)
    finally:
        for device in devices:
            await device.close()

    record_result(
        "node_kill", verdict, failed_over=moved, retried=sum(bool(s.failures) for s in history.sends.values()),
        late_device={k: v for k, v in final.summary().items() if k != "recovery_time_s"},
    )
    verdict.assert_clean()
    final.assert_clean()
    assert verdict.acked == PEOPLE * SENDS_EACH
    assert moved == PEOPLE // 2  # every client of the dead node reconnected to the other
    assert verdict.recovery_time is not None
    stored = kill_cluster.db.count("qim_messagerecord", "conversation_id IN (?, ?, ?, ?)",
                                   (group, dms[0], dms[2], dms[4]))
    assert stored == PEOPLE * SENDS_EACH  # one row per client_msg_id: retries wrote nothing twice
