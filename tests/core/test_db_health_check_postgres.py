"""The DB-thread health check (qim/gateway/db.py checked_when_idle, QIM_DB_HEALTH_CHECK_IDLE_S) on
PostgreSQL, with the node's database sessions killed by pg_terminate_backend: a connection
that sat idle past the setting is checked and replaced before use, so a SEND answers ACK at
once; one used more recently is trusted, so a SEND on a killed one may answer `unavailable`
once, and its retry with the same client_msg_id is written exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group, send_text

PATIENCE_S = 120


def deployment(postgres, pg_template, redis_proc, work_dir, idle_s: str) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    running = start_cluster(postgres, pg_template, redis_proc, work_dir, nodes=1,
                            extra_env={"QIM_DB_HEALTH_CHECK_IDLE_S": idle_s, "QIM_PER_USER_MSG_RATE": "1000"})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def checked(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    yield from deployment(postgres, pg_template, redis_proc, work_dir, "0.5")


@pytest.fixture(scope="module")
def trusting(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    yield from deployment(postgres, pg_template, redis_proc, work_dir, "3600")


def kill_sessions(running: QimDeployment) -> int:
    """Terminate every session of the node's database but this one; answers how many."""
    rows = running.db.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    return sum(1 for (done,) in rows if done)


async def test_an_idle_killed_connection_is_checked_and_replaced_before_a_send(checked: QimDeployment) -> None:
    tenant = checked.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    group = create_group(alice, bob)
    client = await alice.connect()
    for i in range(3):
        await send_text(client, group, f"warm {i}")
    assert kill_sessions(checked) >= 1
    await asyncio.sleep(1.5)  # past QIM_DB_HEALTH_CHECK_IDLE_S: a time to exceed, not a speed
    for i in range(3):  # each answers ACK on its first try: the health check replaced the connection
        ack = await send_text(client, group, f"after {i}")
        assert ack["conversation_seq"] == 4 + i
    await client.close()


async def test_a_recently_used_killed_connection_fails_cleanly_and_the_retry_is_written_once(
    trusting: QimDeployment,
) -> None:
    tenant = trusting.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    group = create_group(alice, bob)
    client = await alice.connect()
    await send_text(client, group, "warm")
    assert kill_sessions(trusting) >= 1
    codes: list[str] = []
    for i in range(3):
        deadline = time.monotonic() + PATIENCE_S
        while True:  # the same client_msg_id until it is ACKed
            try:
                await send_text(client, group, f"after {i}", client_msg_id=f"after-{i}")
                break
            except QimError as error:
                codes.append(error.code)
                assert time.monotonic() < deadline, codes
    await client.close()
    assert set(codes) <= {"unavailable"}  # a clear, retryable refusal, nothing else
    rows = trusting.db.query(
        "SELECT client_msg_id, count(*) FROM qim_messagerecord WHERE conversation_id = %s "
        "AND client_msg_id LIKE 'after-%%' GROUP BY client_msg_id ORDER BY client_msg_id", (group,),
    )
    assert rows == [("after-0", 1), ("after-1", 1), ("after-2", 1)]
