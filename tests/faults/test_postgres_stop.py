"""PostgreSQL stopped (or crashed) for a few seconds under two nodes: SENDs meanwhile get `ERROR unavailable`
(no dropped connection), no ACK without a commit, and service resumes by itself once the
database is back; the checker finds nothing lost, duplicated, reordered or unexpected."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group
from tests.faults.reports import record_result
from tests.harness.checker import History
from tests.harness.personas import PASSWORD, Persona, api
from tests.harness.qim_process import QimNode, make_pg_template
from tests.harness.services import PostgresServer
from tests.harness.traffic import Device, retry_unacked, send_steadily, wait_until

pytestmark = pytest.mark.faults

PEOPLE = 4
SENDS_EACH = 30
OUTAGE_S = 3.0
# The traffic's deadline spans the fault and its healing, and each wait ends when its
# condition holds: generous for two xdist workers on a loaded 2-core machine.
PATIENCE_S = 120
CLOSE_TRY_AGAIN_LATER = 4503  # AUTH that could not be checked: the database is away (protocol.md §4)


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PostgresServer]:
    """Its own PostgreSQL: stopping the session's would break every other test. Durable (fsync,
    synchronous commits) as in production, so that a crash may not take back an ACKed commit."""
    server = PostgresServer.start(durable=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def outage_cluster(own_postgres, quiet_redis, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(
        own_postgres, make_pg_template(own_postgres), quiet_redis, work_dir,
        extra_env={"QIM_PER_USER_MSG_RATE": "1000"},
    )
    yield deployment
    deployment.stop()


async def refusals_during_outage(node: QimNode, persona: Persona) -> tuple[tuple[int, str], tuple[str, int]]:
    """What a REST call and a new socket's AUTH get while the database is away."""
    answer = await asyncio.to_thread(
        api, node, "POST", "auth/token",
        json={"tenant": "acme", "username": persona.user_id, "password": PASSWORD, "device_id": "laptop"},
    )
    async with connect(node.ws_url) as ws:
        await ws.send(json.dumps({"type": "AUTH", "token": persona.token(), "device_id": "phone"}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 30))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 30)
        return (answer.status_code, answer.json()["code"]), (error["code"], ws.close_code)


@dataclass
class Outage:
    halted_at: float
    resumed_at: float
    rest: tuple[int, str]
    auth: tuple[str, int]


async def stop_postgres_for_a_while(
    pg: PostgresServer, mode: str, history: History, devices: list[Device], node: QimNode, persona: Persona
) -> Outage:
    """Stop PostgreSQL (marking the fault), see SENDs, a REST call and an AUTH refused, and
    start it again after OUTAGE_S (marking it healed). pg_ctl runs in a thread: the clients
    keep reading meanwhile."""
    history.fault()
    await asyncio.to_thread(pg.halt, mode)
    halted_at = time.monotonic()
    await wait_until(lambda: any(d.codes for d in devices), PATIENCE_S, "a SEND refused during the outage")
    rest, auth = await refusals_during_outage(node, persona)
    await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - halted_at)))  # the outage lasts a few seconds
    resumed_at = time.monotonic()  # from the start command on: PostgreSQL may serve before it returns
    await asyncio.to_thread(pg.resume)
    history.healed()
    return Outage(halted_at, resumed_at, rest, auth)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_postgresql_stopped_for_seconds_loses_nothing_and_service_resumes(
    outage_cluster: QimDeployment, own_postgres: PostgresServer, mode: str
) -> None:
    """`fast`: stopped by an operator; `immediate`: crashed (sessions killed, WAL replayed)."""
    n1, n2 = outage_cluster.nodes
    tenant = outage_cluster.tenants["acme"]
    people = [tenant.persona(f"{mode}{i}") for i in range(PEOPLE)]
    group = create_group(people[0], *people[1:])
    members = {f"{mode}{i}": [group] for i in range(PEOPLE)}
    history = History()
    devices = [
        await Device.open(f"{mode}{i}", people[i], [n1, n2] if i % 2 == 0 else [n2, n1], history)
        for i in range(PEOPLE)
    ]
    try:
        deadline = time.monotonic() + PATIENCE_S
        traffic = [asyncio.create_task(send_steadily(d, [group], SENDS_EACH, 0.1, deadline)) for d in devices]
        await wait_until(lambda: sum(1 for s in history.sends.values() if s.acks) >= PEOPLE * SENDS_EACH // 4,
                         PATIENCE_S, "a quarter of the traffic ACKed")
        outage = await stop_postgres_for_a_while(own_postgres, mode, history, devices, n2, people[0])
        await asyncio.gather(*traffic)
        await retry_unacked(devices, history, deadline)
        assert history.unacked() == []
        # Service is back at the first ACK of a SEND that had been refused during the outage.
        first_ack_after = min(s.acked_at for s in history.sends.values() if s.acked_at and "unavailable" in s.failures)
        await wait_until(lambda: history.missing(members) == 0, PATIENCE_S, "every member caught up",
                         describe=lambda: history.check(members).describe())
        verdict = history.check(members)
        drops = sum(d.client.reconnects for d in devices)
        codes = sorted({code for d in devices for code in d.codes})
    finally:
        for device in devices:
            await device.close()

    record_result(
        f"postgres_stop_{mode}", verdict, outage_s=round(outage.resumed_at - outage.halted_at, 2),
        refusal_codes=codes, service_back_after_s=round(first_ack_after - outage.resumed_at, 3),
        caught_up_after_restart_s=round((verdict.recovery_time or 0) - (outage.resumed_at - (history.fault_at or 0)), 3),
        retried=sum(bool(s.failures) for s in history.sends.values()),
    )
    verdict.assert_clean()
    assert codes == ["unavailable"]  # a clear, retryable refusal, never a dropped connection
    assert outage.rest == (503, "unavailable")
    assert outage.auth == ("unavailable", CLOSE_TRY_AGAIN_LATER)
    assert drops == 0
    # No ACK without a commit: every ACKed message_id is a row, and only those are.
    acked_ids = {mid for s in history.sends.values() for mid, _ in s.acks}
    rows = {row[0] for row in outage_cluster.db.query(
        "SELECT message_id FROM qim_messagerecord WHERE conversation_id = ?", (group,))}
    assert rows == acked_ids and len(rows) == PEOPLE * SENDS_EACH
