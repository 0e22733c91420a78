"""SEND batches (qim/gateway/batching.py, qim/actions/messages.py do_send_messages) over real sockets,
on SQLite and on PostgreSQL: the SENDs to one conversation that arrive while its transaction
waits are written in one, and each still gets its own ACK, seq, mailbox entries and badge.

To make a batch happen for sure, the test holds what a SEND transaction takes first (SQLite's
write lock; on PostgreSQL the conversation's row lock), sends one opener, whose batch then
waits on it, sends the rest, waits until the node has received them all (its `send_requests`
counter), and lets go.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager

from tests.conftest import QimDeployment
from tests.control.control_helpers import user_pk
from tests.core.conversation_helpers import create_group, send_text, sync_all
from tests.harness.batches import counter, lock_held, until_counted
from tests.harness.personas import TenantHandle
from tests.harness.qim_process import QimDatabase

TIMEOUT = {"request_timeout": 30.0}


def conversation_lock_held(db: QimDatabase, group: str) -> AbstractContextManager[None]:
    return lock_held(db, "SELECT id FROM qim_conversation WHERE id = %s FOR UPDATE", (group,))


async def many_senders_in_one_batch(deployment: QimDeployment, tenant: TenantHandle) -> None:
    node = deployment.node
    owner, twin = tenant.persona("owner"), tenant.persona("twin")
    members = [tenant.persona(f"s{i}") for i in range(10)]
    quiet = tenant.persona("quiet")
    group = create_group(owner, twin, quiet, *members)
    o = await owner.connect(**TIMEOUT)
    clients = [await m.connect(**TIMEOUT) for m in members]
    phone, laptop = await twin.connect(device_id="phone", **TIMEOUT), await twin.connect(device_id="laptop", **TIMEOUT)
    q = await quiet.connect(**TIMEOUT)
    await send_text(o, group, "before")
    _, start = await sync_all(q)

    base, batches = counter(node, tenant, "send_requests"), counter(node, tenant, "send_batches")
    with conversation_lock_held(deployment.db, group):
        opener = asyncio.ensure_future(send_text(o, group, "opener"))
        await until_counted(node, tenant, "send_requests", base + 1)
        rest = asyncio.gather(
            *(send_text(c, group, f"from s{i}") for i, c in enumerate(clients)),
            # One user's retry from two devices at once: one message, the same ACK twice.
            send_text(phone, group, "twice", client_msg_id="twin-dup"),
            send_text(laptop, group, "twice", client_msg_id="twin-dup"),
        )
        await until_counted(node, tenant, "send_requests", base + 1 + len(clients) + 2)
    acks = await rest
    opened = await opener
    assert counter(node, tenant, "send_batches") - batches == 2  # the opener's, then all the rest

    assert acks[-1] == acks[-2]
    seqs = sorted({a["conversation_seq"] for a in acks})
    assert seqs == list(range(opened["conversation_seq"] + 1, opened["conversation_seq"] + 1 + len(clients) + 1))
    assert deployment.db.count("qim_messagerecord", "conversation_id = ? AND client_msg_id = ?", (group, "twin-dup")) == 1

    # A member's mailbox follows the log: one entry per message, in seq order, contiguous.
    events, _ = await sync_all(q, after=start)
    mine = [e for e in events if e["conversation_id"] == group]
    assert [e["message"]["conversation_seq"] for e in mine] == [opened["conversation_seq"], *seqs]
    assert [e["mailbox_seq"] for e in mine] == list(range(start + 1, start + 1 + len(mine)))
    assert [e["message"]["message_id"] for e in mine[1:]] == [
        a["message_id"] for a in sorted({a["message_id"]: a for a in acks}.values(), key=lambda a: a["conversation_seq"])
    ]
    # Badges count what others wrote: all 13 messages for the quiet member, 12 for a sender.
    badge = "SELECT badge FROM qim_userbadgestate WHERE user_id = ?"
    assert deployment.db.query(badge, (user_pk(deployment, tenant.name, quiet.user_id),))[0][0] == 13
    assert deployment.db.query(badge, (user_pk(deployment, tenant.name, members[3].user_id),))[0][0] == 12
    assert deployment.db.query(badge, (user_pk(deployment, tenant.name, owner.user_id),))[0][0] == 11


async def test_a_batch_of_sends_on_sqlite_keeps_every_seq_mailbox_and_badge(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    await many_senders_in_one_batch(embedded, acme)


async def test_a_batch_of_sends_on_postgres_keeps_every_seq_mailbox_and_badge(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    await many_senders_in_one_batch(cluster, cluster_acme)
