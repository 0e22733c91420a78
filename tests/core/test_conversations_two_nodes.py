"""Conversations on two nodes sharing PostgreSQL and Redis: concurrent seqs, cross-node EVENTs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group, send_text, sync_all
from tests.harness.personas import TenantHandle


async def test_concurrent_sends_from_two_nodes_get_gap_free_unique_seqs(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    n1, n2 = cluster.nodes
    senders = [cluster_acme.persona(f"sender{i}") for i in range(6)]
    reader = cluster_acme.persona("reader")
    group = create_group(senders[0], *senders[1:], reader)
    clients = [await p.connect(n1 if i % 2 == 0 else n2) for i, p in enumerate(senders)]

    async def burst(client, tag: str) -> list[dict]:  # type: ignore[no-untyped-def]
        acks = []
        for i in range(10):
            acks.append(await send_text(client, group, f"{tag}-{i}", client_msg_id=f"{tag}-{i}"))
        return acks

    results = await asyncio.gather(*(burst(c, f"s{i}") for i, c in enumerate(clients)))
    seqs = sorted(ack["conversation_seq"] for acks in results for ack in acks)
    assert seqs == list(range(1, 61))
    assert cluster.db.count("qim_messagerecord", "conversation_id = ?", (group,)) == 60

    r = await reader.connect(n2)
    events, _ = await sync_all(r)
    mine = [e for e in events if e["conversation_id"] == group]
    assert sorted(e["message"]["conversation_seq"] for e in mine) == list(range(1, 61))
    mailbox_seqs = [e["mailbox_seq"] for e in mine]
    assert mailbox_seqs == sorted(set(mailbox_seqs))


async def test_an_event_sent_on_node_1_reaches_members_on_node_2(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    n1, n2 = cluster.nodes
    alice, bob = cluster_acme.persona("alice"), cluster_acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(n1), await bob.connect(n2)
    ack = await send_text(a, group, "across")
    event = (await b.next_push(timeout=5, type="EVENT"))["event"]
    assert event["message"]["message_id"] == ack["message_id"]
    assert event["message"]["payload"] == {"text": "across"}


@pytest.fixture(scope="module")
def one_send_per_20_s(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """A budget so small that no machine is slow enough to see it refill between two SENDs."""
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env={"QIM_PER_USER_MSG_RATE": "0.05"})
    yield deployment
    deployment.stop()


async def test_the_message_rate_is_one_budget_across_nodes(one_send_per_20_s: QimDeployment) -> None:
    from qimclient import QimError

    n1, n2 = one_send_per_20_s.nodes
    tenant = one_send_per_20_s.tenants["acme"]
    alice = tenant.persona("alice")
    group = create_group(alice, tenant.persona("bob"))
    phone, laptop = await alice.connect(n1, device_id="phone"), await alice.connect(n2, device_id="laptop")
    await send_text(phone, group, "the one SEND of this window")
    # Another node, the same user: the same budget (two budgets would accept it).
    with pytest.raises(QimError) as refused:
        await send_text(laptop, group, "over the budget")
    assert refused.value.code == "rate_limited"
    assert refused.value.retry_after_ms is not None and refused.value.retry_after_ms > 0
    await tenant.close_clients()


async def test_a_read_event_on_postgresql_carries_its_body_and_skips_only_the_marking_device(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    """Mailbox rows are written set-based (qim/actions/mailbox.py): the control body and the
    origin device must survive that SQL on PostgreSQL as they do on SQLite."""
    from tests.control.control_helpers import controls, mark_read, next_control

    n1, n2 = cluster.nodes
    alice, bob = cluster_acme.persona("alice"), cluster_acme.persona("bob")
    group = create_group(alice, bob)
    sender = await bob.connect(n1, device_id="phone-a")  # same device_id as alice's marker
    for i in range(2):
        await send_text(sender, group, f"m{i}")
    phone, tablet = await alice.connect(n1, device_id="phone-a"), await alice.connect(n2, device_id="tablet-b")

    await mark_read(phone, group, 2)
    event = await next_control(tablet, "qim.read.v1", timeout=10)
    assert event["control"] == {
        "custom_type": "qim.read.v1", "read_conversation_seq": 2, "actor_id": alice.user_id,
        "origin_device_id": "phone-a",
    }
    assert await controls(phone, "qim.read.v1") == []
    assert await controls(tablet, "qim.read.v1", group) == [event["control"]]
    bob_events, _ = await sync_all(sender)
    assert [e["message"]["payload"] for e in bob_events if e["conversation_id"] == group] == [
        {"text": "m0"}, {"text": "m1"},
    ]
