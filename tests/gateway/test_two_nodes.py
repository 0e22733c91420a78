"""Two daphne nodes on PostgreSQL and Redis: per-node batches and presence across nodes."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import QimDeployment
from tests.harness.personas import TenantHandle


def layer_received(cluster: QimDeployment, index: int, admin_token: str) -> int:
    return cluster.nodes[index].stats(admin_token)["counters"].get("layer_messages_received", 0)


async def test_presence_flips_across_two_nodes(cluster: QimDeployment, cluster_acme: TenantHandle) -> None:
    n1, n2 = cluster.nodes
    alice, bob = cluster_acme.persona("alice"), cluster_acme.persona("bob")
    watcher = await alice.connect(n1)
    assert await watcher.subscribe_presence([bob.user_id]) == {bob.user_id: False}

    on_n2 = await bob.connect(n2, device_id="phone")
    online = await watcher.next_push(timeout=5, type="PRESENCE")
    assert (online["user_id"], online["online"]) == (bob.user_id, True)
    on_n1 = await bob.connect(n1, device_id="laptop")
    await on_n2.close()
    with pytest.raises(TimeoutError):
        await watcher.next_push(timeout=0.7, type="PRESENCE")
    await on_n1.close()
    offline = await watcher.next_push(timeout=5, type="PRESENCE")
    assert (offline["user_id"], offline["online"]) == (bob.user_id, False)


async def test_a_batch_from_node_1_reaches_the_right_sockets_on_node_2(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    n1, n2 = cluster.nodes
    token = cluster_acme.admin_token
    alice, bob, carol, dave = (cluster_acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    watcher_n1 = await alice.connect(n1)
    watcher_n2 = await carol.connect(n2)
    bystander_n2 = await dave.connect(n2)
    await watcher_n1.subscribe_presence([bob.user_id])
    await watcher_n2.subscribe_presence([bob.user_id])
    before = layer_received(cluster, 1, token)

    await bob.connect(n1)  # the transition happens on node 1; node 2 hears it in one batch

    for watcher in (watcher_n1, watcher_n2):
        frame = await watcher.next_push(timeout=5, type="PRESENCE")
        assert (frame["user_id"], frame["online"]) == (bob.user_id, True)
    await asyncio.sleep(0.3)
    assert layer_received(cluster, 1, token) - before == 1
    assert bystander_n2.drain_pushes() == []


async def test_a_node_with_no_recipient_receives_no_channel_layer_message(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    n1, n2 = cluster.nodes
    token = cluster_acme.admin_token
    alice, bob, erin = (cluster_acme.persona(n) for n in ("alice", "bob", "erin"))
    await erin.connect(n1)  # node 1 is live, but nobody there watches bob
    watcher = await alice.connect(n2)
    await watcher.subscribe_presence([bob.user_id])
    before = layer_received(cluster, 0, token)

    bob_client = await bob.connect(n2)
    assert (await watcher.next_push(timeout=5, type="PRESENCE"))["online"] is True
    await bob_client.close()
    assert (await watcher.next_push(timeout=5, type="PRESENCE"))["online"] is False

    await asyncio.sleep(0.3)
    assert layer_received(cluster, 0, token) == before
