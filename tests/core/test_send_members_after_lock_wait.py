"""A SEND that waited for the conversation's lock while a member left is not delivered to
the leaver, on PostgreSQL (qim/actions/log.py lock_with_members: the lock and the member list
are one statement, whose snapshot predates the wait; the members are read again when the
locked row moved meanwhile). The leave is a real REST call, held mid-transaction by a row
lock this test takes on the leaver's membership row."""

from __future__ import annotations

import asyncio
import time

import psycopg

from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle, api

PATIENCE_S = 120


def lock_waiters(deployment: QimDeployment) -> int:
    return deployment.db.query(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )[0][0]


async def wait_for_waiters(deployment: QimDeployment, count: int) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while lock_waiters(deployment) < count:
        assert time.monotonic() < deadline, f"never {count} sessions waiting on a lock"
        await asyncio.sleep(0.05)


async def test_a_send_queued_behind_a_leave_skips_the_leaver(cluster: QimDeployment, cluster_acme: TenantHandle) -> None:
    alice, bob, carol = (cluster_acme.persona(name) for name in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol)
    client = await alice.connect(cluster.nodes[0])
    await send_text(client, group, "before")
    carol_token = carol.token()
    db = cluster.db
    with psycopg.connect(db.pg.url(db.dbname)) as holder:
        holder.execute(  # the leave will wait here, holding the conversation's lock
            "SELECT m.id FROM qim_membershipinterval m JOIN qim_user u ON u.id = m.user_id "
            "WHERE m.conversation_id = %s AND u.username = %s AND m.left_at IS NULL FOR UPDATE OF m",
            (group, carol.user_id),
        )
        leave = asyncio.create_task(asyncio.to_thread(
            api, cluster.nodes[1], "DELETE", f"conversations/{group}/members/{carol.user_id}", carol_token,
        ))
        await wait_for_waiters(cluster, 1)
        send = asyncio.create_task(send_text(client, group, "after the leave"))
        await wait_for_waiters(cluster, 2)  # the SEND waits for the conversation's lock
        holder.rollback()
    left = await leave
    assert left.status_code < 300, left.text
    ack = await send
    rows = db.query(
        "SELECT u.username FROM qim_usermailboxentry e JOIN qim_messagerecord r ON r.id = e.message_id "
        "JOIN qim_user u ON u.id = e.user_id WHERE r.conversation_id = %s AND r.conversation_seq = %s",
        (group, ack["conversation_seq"]),
    )
    assert sorted(name for (name,) in rows) == sorted([alice.user_id, bob.user_id])
