"""Badges after retention and erasure, on SQLite and on PostgreSQL: the badge a push carries
counts only messages that still exist, so `qim_retention` lowers the badges of the readers of
what it deletes (never below zero, never another tenant's), reading what is left brings it to
0, and `qim_user_erase` lowers them by the erased user's messages it turns into tombstones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_cluster, start_embedded
from tests.core.conversation_helpers import create_group, send_text
from tests.core.retention_helpers import age, set_retention
from tests.harness.personas import Persona

FAST = {"QIM_PER_USER_MSG_RATE": "1000", "QIM_PER_USER_REACTION_RATE": "1000"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def deployment(request: pytest.FixtureRequest, work_dir: Path) -> Iterator[QimDeployment]:
    if request.param == "sqlite":
        deployment = start_embedded(request.getfixturevalue("sqlite_template"), work_dir, extra_env=FAST)
    else:
        deployment = start_cluster(request.getfixturevalue("postgres"), request.getfixturevalue("pg_template"),
                                   request.getfixturevalue("redis_proc"), work_dir, nodes=1, extra_env=FAST)
    yield deployment
    deployment.stop()


def stored_badge(deployment: QimDeployment, persona: Persona) -> int | None:
    """The badge row a push would read (None: the user has none yet)."""
    rows = deployment.db.query(
        "SELECT b.badge FROM qim_userbadgestate b JOIN qim_user u ON u.id = b.user_id "
        "JOIN qim_tenant t ON t.id = u.tenant_id WHERE t.name = ? AND u.username = ?",
        (persona.tenant.name, persona.user_id))
    return rows[0][0] if rows else None


async def listed_badge(client) -> int:  # type: ignore[no-untyped-def]
    """The badge by definition: CONVERSATIONS sums unread over what exists."""
    return (await client.request("CONVERSATIONS"))["badge"]


async def test_retention_lowers_the_badges_of_the_deleted_messages_readers(deployment: QimDeployment) -> None:
    acme, globex = deployment.tenants["acme"], deployment.tenants["globex"]
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    group, pair = create_group(alice, bob, carol), create_group(alice, carol, title="pair")
    a, b, c = await alice.connect(), await bob.connect(), await carol.connect()
    old = [await send_text(a, group, f"old {i}") for i in range(5)]
    await send_text(c, group, "carol's own old one")  # counts for alice and bob, never for carol
    await b.request("MARK_READ", conversation_id=group, read_conversation_seq=old[1]["conversation_seq"])
    age(deployment.db, group)
    # globex's carol has an old unread message too, in a tenant without a retention.
    g_alice, g_carol = globex.persona("alice"), globex.persona("carol")
    g_group = create_group(g_alice, g_carol)
    await send_text(await g_alice.connect(), g_group, "globex old")
    age(deployment.db, g_group)
    for text in ("fresh 1", "fresh 2"):
        await send_text(a, group, text)
    pair_seq = (await send_text(a, pair, "fresh pair"))["conversation_seq"]
    assert [stored_badge(deployment, who) for who in (alice, bob, carol)] == [1, 6, 8]

    set_retention(acme, 3600)
    deployment.manage("qim_retention", "--tenant", "acme", "--batch", "2")

    # alice: only carol's old one counted, and it is gone; bob: 3 unread old ones of his 4
    # went, carol: her 5; carol keeps the fresh group messages and the pair's.
    assert [stored_badge(deployment, who) for who in (alice, bob, carol)] == [0, 2, 3]
    for who, client in ((alice, a), (bob, b), (carol, c)):
        assert await listed_badge(client) == stored_badge(deployment, who)
    assert stored_badge(deployment, g_carol) == 1
    # Reading what is left brings the badge down to 0.
    head = (await send_text(a, group, "fresh 3"))["conversation_seq"]
    await c.request("MARK_READ", conversation_id=group, read_conversation_seq=head)
    assert stored_badge(deployment, carol) == 1
    await c.request("MARK_READ", conversation_id=pair, read_conversation_seq=pair_seq)
    assert stored_badge(deployment, carol) == 0
    await acme.close_clients()
    await globex.close_clients()



async def test_erasure_lowers_the_badges_of_the_erased_users_readers(deployment: QimDeployment) -> None:
    acme = deployment.tenants["acme"]
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    group, pair = create_group(bob, alice, carol), create_group(alice, carol, title="pair")
    a, c = await alice.connect(), await carol.connect()
    for i in range(3):
        await send_text(a, group, f"alice {i}")
    await send_text(a, pair, "alice to carol")
    await send_text(c, group, "carol's")
    assert [stored_badge(deployment, who) for who in (bob, carol)] == [4, 4]
    await acme.close_clients()

    deployment.manage("qim_user_erase", "--tenant", "acme", "--user", alice.user_id, "--yes", "--batch", "2")

    assert [stored_badge(deployment, who) for who in (bob, carol)] == [1, 0]
    b = await bob.connect()
    assert await listed_badge(b) == 1
    await acme.close_clients()
