"""Two groups with the same members SENDing at once on two nodes sharing PostgreSQL: the
batches lock the members' mailbox heads and badges in user order (qim/actions/mailbox.py),
so they wait for each other and never deadlock: every SEND is ACKed, every member's mailbox
is contiguous up to its head with one entry per message, and every badge counts what the
others wrote."""

from __future__ import annotations

import asyncio

from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle

MEMBERS = 12
SENDERS = 4
EACH = 10  # per sender and group


async def test_two_groups_sharing_members_send_concurrently_without_deadlock(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    people = [cluster_acme.persona(f"shared{i}") for i in range(MEMBERS)]
    groups = [create_group(people[0], *people[1:], title=t) for t in ("one", "two")]
    clients = [await people[i].connect(cluster.nodes[i % 2]) for i in range(SENDERS)]

    async def sends(index: int) -> list[dict]:
        return [await send_text(clients[index], groups[n % 2], f"{index}-{n}") for n in range(2 * EACH)]

    acks = await asyncio.gather(*(sends(i) for i in range(SENDERS)))
    assert sum(len(a) for a in acks) == SENDERS * 2 * EACH
    for group in groups:
        seqs = sorted(r[0] for r in cluster.db.query(
            "SELECT conversation_seq FROM qim_messagerecord WHERE conversation_id = %s", (group,)))
        assert seqs == list(range(1, SENDERS * EACH + 1))
    total = SENDERS * 2 * EACH
    rows = cluster.db.query(
        "SELECT u.username, count(*), min(e.mailbox_seq), max(e.mailbox_seq), h.mailbox_head, coalesce(b.badge, 0) "
        "FROM qim_usermailboxentry e JOIN qim_user u ON u.id = e.user_id "
        "JOIN qim_usermailboxhead h ON h.user_id = e.user_id LEFT JOIN qim_userbadgestate b ON b.user_id = e.user_id "
        "WHERE e.conversation_id = ANY(%s) GROUP BY u.username, h.mailbox_head, b.badge",
        (groups,),
    )
    by_user = {name: rest for name, *rest in rows}
    assert set(by_user) == {p.user_id for p in people}
    for index, person in enumerate(people):
        count, low, high, head, badge = by_user[person.user_id]
        assert (count, high - low + 1, high) == (total, total, head)
        assert badge == total - (2 * EACH if index < SENDERS else 0)
