"""Issue #21 item 4: Redis under Sentinel (a master, a replica, three sentinels). The master
is killed (-9) mid-traffic; the sentinels promote the replica and both nodes follow it: every
request meanwhile is answered (an ACK or ERROR `unavailable`), no socket drops, and AUTH, SEND
pushed across nodes, rooms both ways and presence resume on both nodes; the checker finds no
acknowledged message lost, duplicated or reordered. The time to resume is recorded
(var/fault-results.json, docs/operations.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.faults.reports import record_result
from tests.faults.probes import group_traffic, probe_parties, wait_until
from tests.harness.personas import TenantHandle
from tests.harness.redis_sentinel import MASTER_NAME, SentinelGroup
from tests.harness.traffic import retry_unacked, send_steadily
from tests.harness.traffic import wait_until as wait_for

pytestmark = pytest.mark.faults

PEOPLE = 4
SENDS_EACH = 30
PATIENCE_S = 90


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelGroup]:
    group = SentinelGroup.start()
    yield group
    group.stop()


@pytest.fixture(scope="module")
def sentinel_cluster(postgres, pg_template, sentinels: SentinelGroup, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, sentinels.master, work_dir, extra_env={
        # No QIM_REDIS_URL: every Redis user finds the master through the sentinels.
        "QIM_REDIS_URL": "", "QIM_REDIS_SENTINELS": sentinels.addresses, "QIM_REDIS_SENTINEL_MASTER": MASTER_NAME,
        "QIM_PRESENCE_TTL_S": "3", "QIM_ROOM_LEASE_TTL_S": "2",
    })
    yield deployment
    deployment.stop()


async def test_master_killed_the_replica_is_promoted_and_both_nodes_follow(
    sentinel_cluster: QimDeployment, sentinels: SentinelGroup
) -> None:
    n1, n2 = sentinel_cluster.nodes
    tenant: TenantHandle = sentinel_cluster.tenants["acme"]
    group, members, history, devices = await group_traffic(tenant, "s", PEOPLE, n1, n2)
    parties = await probe_parties(tenant, n1, n2)
    a1, b2 = parties.a1, parties.b2
    old_master = sentinels.master_port()
    assert old_master == sentinels.master.port
    try:
        deadline = time.monotonic() + PATIENCE_S
        traffic = [asyncio.create_task(send_steadily(d, [group], SENDS_EACH, 0.1, deadline)) for d in devices]
        await wait_for(lambda: sum(1 for s in history.sends.values() if s.acks) >= PEOPLE * SENDS_EACH // 4,
                       PATIENCE_S, "a quarter of the traffic ACKed")
        history.fault()
        sentinels.master.kill()
        killed = time.monotonic()
        promoted_s = await asyncio.to_thread(
            sentinels.wait_until, lambda: sentinels.master_port() == sentinels.replica.port,
            "the sentinels to promote the replica", PATIENCE_S,
        )
        history.healed()
        errors: list[str] = []
        times = {probe.__name__: await wait_until(probe, errors, PATIENCE_S)
                 for probe in parties.probes((n1, n2))}
        resumed_s = time.monotonic() - killed
        # Readiness asks the sentinels too: both nodes ready again, on the promoted master.
        for node in (n1, n2):
            await wait_for(lambda node=node: httpx.get(f"{node.http_url}/api/v1/ready", timeout=10).status_code == 200,
                           PATIENCE_S, f"{node.node_id} ready")
        await asyncio.gather(*traffic)
        await retry_unacked(devices, history, deadline)
        assert history.unacked() == []
        await wait_for(lambda: history.missing(members) == 0, PATIENCE_S, "every member caught up")
        verdict = history.check(members)
        codes = sorted({code for d in devices for code in d.codes})
        drops = sum(d.client.reconnects for d in devices)
    finally:
        for device in devices:
            await device.close()

    record_result(
        "redis_sentinel_failover", verdict, promoted_after_s=round(promoted_s, 2),
        every_node_serving_after_s=round(resumed_s, 2), probes_s={k: round(v, 3) for k, v in times.items()},
        refusal_codes=codes, retried=sum(bool(s.failures) for s in history.sends.values()),
    )
    verdict.assert_clean()
    assert set(codes) <= {"unavailable"}, codes  # refused clearly while no master, never `internal`
    assert "internal" not in errors, errors
    assert drops == 0, "a socket was dropped during the failover"
    assert a1.is_connected and b2.is_connected
    await tenant.close_clients()
