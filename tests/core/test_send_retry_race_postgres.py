"""A retry that races its original across two nodes, on PostgreSQL, through the SEND batch's
one-trip writes (qim/actions/log_postgresql.py): the log INSERT, mailbox and badge statements
travel as one query, so the unique constraint's error comes out of that query and must undo
all of it; the batch is then written one SEND at a time and the loser answers the winner's ACK.

The conversation's row lock is held while one user's two devices send the same client_msg_id,
one per node (both find nothing in their idempotency read), beside a batch of two on node 1;
then it is let go.
"""

from __future__ import annotations

import asyncio

from tests.conftest import QimDeployment
from tests.control.control_helpers import user_pk
from tests.core.conversation_helpers import create_group, send_text, sync_all
from tests.core.test_send_batches import conversation_lock_held
from tests.harness.batches import counter, until_counted
from tests.harness.personas import TenantHandle

TIMEOUT = {"request_timeout": 60.0}


async def test_a_retry_racing_across_nodes_is_written_once_with_one_ack(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    n1, n2 = cluster.nodes
    tenant = cluster_acme
    owner, twin, quiet = tenant.persona("race-owner"), tenant.persona("race-twin"), tenant.persona("race-quiet")
    other = tenant.persona("race-other")
    group = create_group(owner, twin, quiet, other)
    o = await owner.connect(n1, **TIMEOUT)
    b = await other.connect(n1, **TIMEOUT)  # one connection's frames run in order: its own socket
    phone = await twin.connect(n1, device_id="phone", **TIMEOUT)
    laptop = await twin.connect(n2, device_id="laptop", **TIMEOUT)
    q = await quiet.connect(n2, **TIMEOUT)
    _, start = await sync_all(q)
    on_1, on_2 = counter(n1, tenant, "send_requests"), counter(n2, tenant, "send_requests")

    with conversation_lock_held(cluster.db, group):
        opener = asyncio.ensure_future(send_text(o, group, "opener"))
        await until_counted(n1, tenant, "send_requests", on_1 + 1)
        racing = asyncio.ensure_future(send_text(laptop, group, "twice", client_msg_id="race-dup"))
        await until_counted(n2, tenant, "send_requests", on_2 + 1)
        batch = asyncio.gather(
            send_text(phone, group, "twice", client_msg_id="race-dup"), send_text(b, group, "beside"),
        )
        await until_counted(n1, tenant, "send_requests", on_1 + 3)
    first = await opener
    (dup_1, beside), dup_2 = await batch, await racing

    assert dup_1 == dup_2  # the same message, answered twice
    assert cluster.db.count("qim_messagerecord", "conversation_id = ? AND client_msg_id = ?", (group, "race-dup")) == 1
    seqs = sorted({first["conversation_seq"], dup_1["conversation_seq"], beside["conversation_seq"]})
    assert seqs == [first["conversation_seq"], first["conversation_seq"] + 1, first["conversation_seq"] + 2]

    events, _ = await sync_all(q, after=start)  # nothing of the undone try is left
    mine = [e for e in events if e["conversation_id"] == group]
    assert [e["message"]["conversation_seq"] for e in mine] == seqs
    assert [e["mailbox_seq"] for e in mine] == [start + 1, start + 2, start + 3]
    badge = "SELECT badge FROM qim_userbadgestate WHERE user_id = ?"
    assert cluster.db.query(badge, (user_pk(cluster, tenant.name, quiet.user_id),))[0][0] == 3
    assert cluster.db.query(badge, (user_pk(cluster, tenant.name, owner.user_id),))[0][0] == 2
