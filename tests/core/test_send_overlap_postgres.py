"""Overlapping SEND batches (qim/batching_overlap.py, qim/turns.py) on PostgreSQL over real
sockets: while one batch of a conversation commits and answers, the next one already reads
and queues on the lock. Several members send without waiting for their ACKs; every SEND is
written once, each sender's messages keep the order it sent them in, every member's mailbox
is contiguous and in seq order, live EVENTs arrive in that order, and badges count them all.
"""

from __future__ import annotations

import asyncio

from tests.conftest import QimDeployment
from tests.control.control_helpers import user_pk
from tests.core.conversation_helpers import create_group, send_text, sync_all
from tests.harness.batches import counter
from tests.harness.personas import TenantHandle

TIMEOUT = {"request_timeout": 60.0}
SENDERS, EACH = 4, 25


async def test_overlapping_batches_keep_order_mailboxes_events_and_badges(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    node, tenant = cluster.node, cluster_acme
    owner, quiet = tenant.persona("owner"), tenant.persona("quiet")
    senders = [tenant.persona(f"p{i}") for i in range(SENDERS)]
    group = create_group(owner, quiet, *senders)
    q = await quiet.connect(**TIMEOUT)
    clients = [await s.connect(**TIMEOUT) for s in senders]
    _, start = await sync_all(q)
    q.drain_pushes()
    overlapped = counter(node, tenant, "send_overlapped")

    async def pipelined(index: int) -> list[dict]:
        # gather sends each frame in order before any ACK is awaited
        return await asyncio.gather(*(send_text(clients[index], group, f"{index}-{n}") for n in range(EACH)))

    acks = await asyncio.gather(*(pipelined(i) for i in range(SENDERS)))

    for mine in acks:  # one sender's SENDs keep its order, each its own row
        seqs = [a["conversation_seq"] for a in mine]
        assert seqs == sorted(seqs) and len(set(seqs)) == EACH
    all_seqs = sorted(a["conversation_seq"] for mine in acks for a in mine)
    assert all_seqs == list(range(all_seqs[0], all_seqs[0] + SENDERS * EACH))
    assert counter(node, tenant, "send_overlapped") > overlapped  # the path under test ran

    events, _ = await sync_all(q, after=start)
    seen = [e for e in events if e["conversation_id"] == group]
    assert [e["mailbox_seq"] for e in seen] == list(range(start + 1, start + 1 + SENDERS * EACH))
    assert [e["message"]["conversation_seq"] for e in seen] == all_seqs
    texts = {e["message"]["conversation_seq"]: e["message"]["payload"]["text"] for e in seen}
    for index, mine in enumerate(acks):
        assert [texts[a["conversation_seq"]] for a in mine] == [f"{index}-{n}" for n in range(EACH)]

    live: list[int] = []
    while len(live) < SENDERS * EACH:  # every EVENT pushed, in mailbox order
        push = await q.next_push(timeout=30, type="EVENT")
        if push["event"]["conversation_id"] == group:
            live.append(push["event"]["mailbox_seq"])
    assert live == [e["mailbox_seq"] for e in seen]

    badge = "SELECT badge FROM qim_userbadgestate WHERE user_id = ?"
    assert cluster.db.query(badge, (user_pk(cluster, tenant.name, quiet.user_id),))[0][0] == SENDERS * EACH
    assert cluster.db.query(badge, (user_pk(cluster, tenant.name, senders[0].user_id),))[0][0] == (SENDERS - 1) * EACH
