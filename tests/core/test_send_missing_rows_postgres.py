"""SEND on PostgreSQL moves the members' mailbox heads and badges by plain UPDATEs when every
row exists, and rolls that try back and upserts when one does not (qim/actions/log_postgresql.py):
the group's first event (no member has rows), a member who joins later (a head row from the
join's event, no badge row until a counted message), a badge row that is gone. After each,
every member holds each message exactly once, contiguous up to its head, and every badge
counts what the others wrote."""

from __future__ import annotations

from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import Persona, TenantHandle, api_ok


def mailboxes(cluster: QimDeployment, group: str, names: list[str]) -> dict[str, tuple]:
    """username -> (text messages in the mailbox, entries, lowest and highest seq, head, badge)."""
    rows = cluster.db.query(
        "SELECT u.username, count(m.id), count(*), min(e.mailbox_seq), max(e.mailbox_seq), h.mailbox_head, "
        "coalesce(b.badge, 0) FROM qim_usermailboxentry e JOIN qim_user u ON u.id = e.user_id "
        "JOIN qim_usermailboxhead h ON h.user_id = e.user_id LEFT JOIN qim_userbadgestate b ON b.user_id = e.user_id "
        "LEFT JOIN qim_messagerecord m ON m.id = e.message_id AND m.counts_unread "
        "WHERE u.username = ANY(%s) GROUP BY u.username, h.mailbox_head, b.badge",
        (names,),
    )
    assert {r[0] for r in rows} == set(names)
    assert all(r[0] for r in cluster.db.query(
        "SELECT count(*) = count(DISTINCT (user_id, message_id)) FROM qim_usermailboxentry "
        "WHERE conversation_id = %s AND message_id IS NOT NULL", (group,)))
    return {name: tuple(rest) for name, *rest in rows}


def assert_mailboxes(cluster: QimDeployment, group: str, expected: dict[str, tuple[int, int]]) -> None:
    """expected: username -> (text messages in its mailbox, badge)."""
    got = mailboxes(cluster, group, list(expected))
    for name, (messages, badge) in expected.items():
        texts, entries, low, high, head, stored = got[name]
        assert (texts, stored) == (messages, badge), name
        assert (high - low + 1, high) == (entries, head), name


def badge_row(cluster: QimDeployment, person: Persona) -> list[tuple]:
    return cluster.db.query(
        "SELECT b.badge FROM qim_userbadgestate b JOIN qim_user u ON u.id = b.user_id WHERE u.username = %s",
        (person.user_id,),
    )


async def test_heads_and_badges_are_written_whether_their_rows_exist_or_not(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    owner, *others = [cluster_acme.persona(f"rows{i}") for i in range(4)]
    late = cluster_acme.persona("rows-late")
    group = create_group(owner, *others)
    sender = await owner.connect(cluster.nodes[0])

    await send_text(sender, group, "one")  # the first counted message: no badge row yet
    await send_text(sender, group, "two")  # every row exists: the plain UPDATEs
    assert_mailboxes(cluster, group, {owner.user_id: (2, 0), **{p.user_id: (2, 2) for p in others}})

    api_ok(cluster.nodes[0], "POST", f"conversations/{group}/members", owner.token(), json={"user_ids": [late.user_id]})
    assert badge_row(cluster, late) == []  # the join's event made a head row only
    await send_text(sender, group, "three")  # late's badge row missing: rolled back, upserted
    await send_text(sender, group, "four")
    assert_mailboxes(cluster, group, {owner.user_id: (4, 0), late.user_id: (2, 2), **{p.user_id: (4, 4) for p in others}})

    assert cluster.db.query(
        "DELETE FROM qim_userbadgestate WHERE user_id = (SELECT id FROM qim_user WHERE username = %s) RETURNING badge",
        (others[0].user_id,),
    ) == [(4,)]
    await send_text(sender, group, "five")
    assert badge_row(cluster, others[0]) == [(1,)]
    assert_mailboxes(cluster, group, {
        owner.user_id: (5, 0), late.user_id: (3, 3), others[0].user_id: (5, 1), **{p.user_id: (5, 5) for p in others[1:]},
    })
