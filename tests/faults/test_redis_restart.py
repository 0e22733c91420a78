"""Issue #17 item 5: redis-server killed (-9) mid-traffic and started again empty on the same
port. While it is gone every request is answered (an ACK, or ERROR `unavailable`; AUTH closes
4503), no socket is dropped; once it is back every node serves AUTH, SEND, rooms and presence
within seconds, on connections pooled before the restart (no 1011, no `internal`); the checker
finds nothing lost, duplicated, reordered or unexpected in the group traffic."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from qimclient import QimClient, QimError
from tests.conftest import QimDeployment, start_cluster
from tests.faults.probes import group_traffic, probe_parties, wait_until
from tests.faults.reports import record_result
from tests.harness.personas import Persona, TenantHandle
from tests.harness.redis_server import RedisServer
from tests.harness.traffic import retry_unacked, send_steadily
from tests.harness.traffic import wait_until as wait_for
from tests.rooms.room_helpers import room_send

pytestmark = pytest.mark.faults

# Each probe is retried until it is served: the limit only bounds a failure (a loaded CI
# machine running two workers can take tens of seconds to heal).
BURST = 30
PEOPLE = 4
SENDS_EACH = 30
# The traffic's deadline spans the fault and its healing, and each wait ends when its
# condition holds: generous for two xdist workers on a loaded 2-core machine.
PATIENCE_S = 120


@pytest.fixture(scope="module")
def redis_cluster(postgres, pg_template, own_redis, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, own_redis, work_dir, extra_env={
        "QIM_PRESENCE_TTL_S": "3", "QIM_ROOM_LEASE_TTL_S": "2",
    })
    yield deployment
    deployment.stop()


async def outcome(request) -> str:  # type: ignore[no-untyped-def]
    """'ack', or the ERROR code a request got."""
    try:
        await request
        return "ack"
    except QimError as error:
        return error.code


async def auth_outcome(persona: Persona, node, device_id: str) -> str:  # type: ignore[no-untyped-def]
    """'ok' when AUTH was answered AUTH_OK, else what went wrong (the close code with it)."""
    try:
        client = await persona.connect(node, device_id=device_id, sync=False)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    await client.close()
    return "ok"


async def auth_burst(persona: Persona, nodes) -> list[str]:  # type: ignore[no-untyped-def]
    """BURST AUTHs at once on each node: each node's Redis pools grow to about that many."""
    return list(await asyncio.gather(*(
        auth_outcome(persona, node, f"burst-{node.node_id}") for node in nodes for _ in range(BURST)
    )))


async def all_synced(client: QimClient) -> list[str]:
    """Every message id in the client's mailbox, by SYNC from the start."""
    ids, after = [], 0
    while True:
        batch = await client.request("SYNC", after_mailbox_seq=after)
        for event in batch["events"]:
            message = event.get("message")
            if message is not None:
                ids.append(message["message_id"])
        after = batch["next_mailbox_seq"]
        if not batch["has_more"]:
            return ids


async def test_redis_killed_and_restarted_empty_mid_traffic(redis_cluster: QimDeployment, own_redis: RedisServer) -> None:
    n1, n2 = redis_cluster.nodes
    tenant: TenantHandle = redis_cluster.tenants["acme"]
    group, members, history, devices = await group_traffic(tenant, "r", PEOPLE, n1, n2)
    parties = await probe_parties(tenant, n1, n2)
    alice, carol, a1, b2, room = parties.alice, parties.carol, parties.a1, parties.b2, parties.room
    for node in (n1, n2):
        carol.token(f"burst-{node.node_id}", node)
    assert set(await auth_burst(carol, (n1, n2))) == {"ok"}
    try:
        deadline = time.monotonic() + PATIENCE_S
        traffic = [asyncio.create_task(send_steadily(d, [group], SENDS_EACH, 0.1, deadline)) for d in devices]
        await wait_for(lambda: sum(1 for s in history.sends.values() if s.acks) >= PEOPLE * SENDS_EACH // 4,
                       PATIENCE_S, "a quarter of the traffic ACKed")
        history.fault()
        own_redis.kill()
        killed = time.monotonic()
        await wait_for(lambda: any(d.codes for d in devices), PATIENCE_S, "a SEND refused during the outage")
        outages = [await outcome(room_send(b2, room, "room during")),
                   await outcome(b2.request("PRESENCE_SUB", user_ids=[alice.user_id]))]
        refused = await auth_outcome(carol, n2, f"probe-{n2.node_id}")
        assert a1.is_connected and b2.is_connected, "a socket was dropped during the outage"

        own_redis.start()  # empty: no leases, no presence, no channel-layer groups, no rate windows
        restarted = time.monotonic()
        history.healed()
        # The first use of every connection pooled before the restart is served (it was 1011).
        after_restart = await auth_burst(carol, (n1, n2))
        errors: list[str] = []
        times = {probe.__name__: await wait_until(probe, errors) for probe in parties.probes((n1, n2))}
        recovered_s = time.monotonic() - restarted
        await asyncio.gather(*traffic)
        await retry_unacked(devices, history, deadline)
        assert history.unacked() == []
        await wait_for(lambda: history.missing(members) == 0, PATIENCE_S, "every member caught up")
        verdict = history.check(members)
        codes = sorted({code for d in devices for code in d.codes})
        drops = sum(d.client.reconnects for d in devices)
        burst_later = await auth_burst(carol, (n1, n2))
    finally:
        for device in devices:
            await device.close()

    record_result(
        "redis_restart", verdict, outage_s=round(restarted - killed, 2), refusal_codes=codes,
        every_node_serving_after_s=round(recovered_s, 3), probes_s={k: round(v, 3) for k, v in times.items()},
        retried=sum(bool(s.failures) for s in history.sends.values()),
    )
    verdict.assert_clean()
    assert codes == ["unavailable"], codes  # a clear, retryable refusal, never a dropped connection
    assert set(outages) == {"unavailable"}, outages
    assert "unavailable" in refused and "4503" in refused, refused
    assert set(after_restart) == {"ok"}, [o for o in after_restart if o != "ok"][:5]
    assert set(burst_later) == {"ok"}
    assert "internal" not in errors, errors
    assert drops == 0
    assert a1.is_connected and b2.is_connected
    await tenant.close_clients()


