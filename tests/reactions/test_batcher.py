"""REACT batches (qim/gateway/batching.py) over real sockets, on SQLite and on PostgreSQL: the REACTs to one message
that arrive while its transaction waits go in one batch, and each still gets its own answer.

To make a batch happen for sure (not by luck of timing), the test holds what a REACT
transaction waits on (SQLite's write lock; on PostgreSQL the summary's row lock), sends one
opener REACT, whose batch then waits on it, sends the rest, waits until the node has received
them all (its `react_requests` counter), and lets go.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from collections.abc import Awaitable, Iterator

import pytest

from qimclient import QimClient, QimError
from tests.conftest import QimDeployment, start_embedded, tenant_fixture
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.batches import counter, lock_held, until_counted
from tests.harness.personas import Persona, TenantHandle
from tests.harness.qim_process import QimDatabase

TIMEOUT = {"request_timeout": 30.0}


async def react(client: QimClient, group: str, seq: int, key: str = "+1", action: str = "add") -> dict:
    return await client.request("REACT", conversation_id=group, conversation_seq=seq, reaction_key=key, action=action)


def first_lock_held(db: QimDatabase, group: str) -> AbstractContextManager[None]:
    """What a REACT transaction waits on: SQLite's write lock, or on PostgreSQL the
    message's summary row (which must exist already: react once first; the batch locks the
    message row before it, which nothing else here holds)."""
    return lock_held(
        db, "SELECT id FROM reactions_messagereactionsummary WHERE conversation_id = %s FOR UPDATE", (group,)
    )


async def in_one_batch(deployment: QimDeployment, tenant: TenantHandle, group: str,
                       opener: Awaitable[dict], reacts: list[Awaitable[dict]],
                       elsewhere: list[Awaitable[dict]] | None = None) -> tuple[dict | BaseException, list]:
    """Run `opener` alone in a batch held on the lock, then `reacts` (REACTs to the same
    message) all in the next batch, and `elsewhere` (REACTs to other batch keys) meanwhile.
    Answers the opener's answer and the others' (an exception for an ERROR), in order."""
    node, elsewhere = deployment.node, elsewhere or []
    base = counter(node, tenant, "react_requests")
    batches = counter(node, tenant, "react_batches")
    with first_lock_held(deployment.db, group):
        first = asyncio.ensure_future(opener)
        await until_counted(node, tenant, "react_requests", base + 1)
        rest = asyncio.gather(*reacts, *elsewhere, return_exceptions=True)
        await until_counted(node, tenant, "react_requests", base + 1 + len(reacts) + len(elsewhere))
    answers = await rest
    opened = await asyncio.gather(first, return_exceptions=True)
    # The opener's batch, the one with all of `reacts`, and one per REACT elsewhere.
    assert counter(node, tenant, "react_batches") - batches == 2 + len(elsewhere)
    return opened[0], answers


def reaction_rows(db: QimDatabase, group: str) -> tuple[int, int]:
    """(detail rows, fingerprint rows) of the group's messages."""
    details = db.count("reactions_messagereaction", "conversation_id = ?", (group,))
    fingerprints = db.query(
        "SELECT count(*) FROM reactions_reactionfingerprint f JOIN reactions_messagereactionsummary s"
        " ON f.summary_id = s.id WHERE s.conversation_id = ?", (group,)
    )[0][0]
    return details, fingerprints


async def batch_with_duplicates_and_refusals(deployment: QimDeployment, tenant: TenantHandle,
                                             other_tenant: TenantHandle) -> None:
    owner, twin = tenant.persona("owner"), tenant.persona("twin")
    members = [tenant.persona(f"m{i}") for i in range(24)]
    outsider = tenant.persona("outsider")
    group = create_group(owner, twin, *members)
    o = await owner.connect(**TIMEOUT)
    seq = (await send_text(o, group, "react to me"))["conversation_seq"]
    await react(o, group, seq, "seed")                                   # version 1; the summary exists
    clients = [await m.connect(**TIMEOUT) for m in members]
    twins = [await twin.connect(device_id=d, **TIMEOUT) for d in ("phone", "laptop")]
    e = await outsider.connect(**TIMEOUT)
    wrong_tenant = await other_tenant.persona("mallory").connect(**TIMEOUT)

    opened, answers = await in_one_batch(
        deployment, tenant, group,
        react(o, group, seq),                                            # version 2
        [react(c, group, seq) for c in clients + twins] + [react(e, group, seq)],
        [react(wrong_tenant, group, seq)],
    )

    assert opened == {**opened, "counts": {"seed": 1, "+1": 1}, "summary_version": 2}
    acks, (outsider_answer, wrong_tenant_answer) = answers[:-2], answers[-2:]
    assert all(isinstance(a, dict) and a["type"] == "ACK" for a in acks), acks
    assert isinstance(outsider_answer, QimError) and outsider_answer.code == "forbidden"
    assert isinstance(wrong_tenant_answer, QimError) and wrong_tenant_answer.code == "not_found"
    # 24 members and one of the twins' devices changed the summary: versions 3..27, each ACK
    # answering from its own place in the batch; the other twin repeats one of them.
    versions = [a["summary_version"] for a in acks]
    assert sorted(set(versions)) == list(range(3, 28)) and len(versions) == 26
    assert all(a["counts"] == {"seed": 1, "+1": a["summary_version"] - 1} for a in acks), acks

    history = await o.request("HISTORY", conversation_id=group)
    assert history["messages"][0]["reactions"] == {"counts": {"seed": 1, "+1": 26}, "summary_version": 27}
    assert reaction_rows(deployment.db, group) == (27, 0)                 # a small group: details
    assert deployment.db.count("reactions_messagereactionsummary", "conversation_id = ?", (group,)) == 1


@pytest.fixture(scope="module")
def tight_details(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_REACTION_DETAIL_MAX_PER_MESSAGE": "3", "QIM_PER_USER_REACTION_RATE": "100",
    })
    yield deployment
    deployment.stop()


tight_acme = tenant_fixture("tight_details")


async def test_a_batch_of_many_users_duplicates_and_refusals_on_sqlite(
    embedded: QimDeployment, acme: TenantHandle, globex: TenantHandle
) -> None:
    await batch_with_duplicates_and_refusals(embedded, acme, globex)


async def test_a_batch_crosses_the_detail_limit_and_removes_keep_the_books(
    tight_details: QimDeployment, tight_acme: TenantHandle
) -> None:
    owner, twin = tight_acme.persona("owner"), tight_acme.persona("twin")
    members: list[Persona] = [tight_acme.persona(f"m{i}") for i in range(6)]
    late = tight_acme.persona("late")
    group = create_group(owner, twin, late, *members)
    o = await owner.connect(**TIMEOUT)
    o2 = await owner.connect(device_id="laptop", **TIMEOUT)  # a socket answers its frames in turn
    seq = (await send_text(o, group, "react to me"))["conversation_seq"]
    await react(o, group, seq, "seed")                                   # detail 1
    clients = [await m.connect(**TIMEOUT) for m in members]
    twins = [await twin.connect(device_id=d, **TIMEOUT) for d in ("phone", "laptop")]

    _, added = await in_one_batch(tight_details, tight_acme, group, react(o, group, seq),  # detail 2
                                  [react(c, group, seq) for c in clients + twins])
    assert max(a["counts"]["+1"] for a in added) == 8
    assert reaction_rows(tight_details.db, group) == (3, 6)              # the third detail, then fingerprints

    _, removed = await in_one_batch(
        tight_details, tight_acme, group, react(o, group, seq, "seed", "remove"),
        [react(c, group, seq, action="remove") for c in clients + twins]
        + [react(o2, group, seq, "absent", "remove")],
    )
    final = max(removed, key=lambda a: a["summary_version"])
    assert final["counts"] == {"+1": 1} and final["summary_version"] == 1 + 8 + 1 + 7
    assert reaction_rows(tight_details.db, group) == (1, 0)              # the owner's "+1"
    # The summary's detail count went down with the removes: a new reaction is a detail again.
    again = await react(await late.connect(**TIMEOUT), group, seq)
    assert again["counts"] == {"+1": 2}
    assert reaction_rows(tight_details.db, group) == (2, 0)


async def test_a_batch_of_many_users_duplicates_and_refusals_on_postgres(cluster: QimDeployment) -> None:
    acme, globex = cluster.tenants["acme"], cluster.tenants["globex"]
    try:
        await batch_with_duplicates_and_refusals(cluster, acme, globex)
    finally:
        await acme.close_clients()
        await globex.close_clients()


async def test_reacts_on_two_nodes_at_once_count_exactly_on_postgres(cluster: QimDeployment) -> None:
    acme = cluster.tenants["acme"]
    try:
        owner = acme.persona("owner")
        members = [acme.persona(f"m{i}") for i in range(30)]
        group = create_group(owner, *members)
        o = await owner.connect(cluster.nodes[0], **TIMEOUT)
        seq = (await send_text(o, group, "react to me"))["conversation_seq"]
        clients = [await m.connect(cluster.nodes[i % 2], device_id=d, **TIMEOUT)
                   for i, m in enumerate(members) for d in ("phone", "laptop")]
        answers = await asyncio.gather(*(react(c, group, seq) for c in clients))
        # Every device answered; each user counted once, across both nodes' batches.
        versions = sorted(a["summary_version"] for a in answers)
        assert sorted(set(versions)) == list(range(1, 31))
        assert all(a["counts"] == {"+1": a["summary_version"]} for a in answers)
        history = await o.request("HISTORY", conversation_id=group)
        assert history["messages"][0]["reactions"] == {"counts": {"+1": 30}, "summary_version": 30}
        assert reaction_rows(cluster.db, group) == (30, 0)
    finally:
        await acme.close_clients()
