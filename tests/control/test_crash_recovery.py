"""C-5 with real process kills: a node started with QIM_FAULT dies between the two commits of a
recall or an edit (or before a read sync's flush); the restarted node (or `qim_recover`)
finishes the job, and every member sees the outcome. Lost recalls: 0."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from qimclient import ConnectionLost
from tests.conftest import QimDeployment, start_cluster, start_embedded
from tests.control.control_helpers import (
    controls,
    drop_pushes,
    history_by_seq,
    lost_recalls,
    mark_read,
    next_control,
    read_entries,
    recall,
    stored_badge,
)
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.qim_process import last_json_line, manage

KILLED = 137
NO_FAULT = {"QIM_FAULT": ""}


def row_state(deployment: QimDeployment, conversation_id: str, seq: int) -> tuple:
    return deployment.db.query(
        "SELECT state, recall_event_conversation_seq, payload, edit_event_conversation_seq FROM qim_messagerecord "
        "WHERE conversation_id = ? AND conversation_seq = ?",
        (conversation_id, seq),
    )[0]


async def die_in_the_window(deployment: QimDeployment, pending: Awaitable[dict]) -> None:
    """The request never gets its answer: the node exits at the fault point."""
    with pytest.raises(ConnectionLost):
        await pending
    assert deployment.node.wait_exit() == KILLED


@pytest.fixture
async def crash_node(sqlite_template: Path, work_dir: Path, request) -> AsyncIterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """A fresh embedded node started with QIM_FAULT=<param[0]> and the extra env param[1]."""
    fault, extra = request.param
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_FAULT": fault, **extra})
    yield deployment
    for tenant in deployment.tenants.values():
        await tenant.close_clients()
    deployment.stop()


def manage_without_fault(deployment: QimDeployment, *args: str) -> dict:
    return last_json_line(manage({**deployment.env, **NO_FAULT}, *args))


@pytest.mark.parametrize("crash_node", [("recall.after_log", {})], indirect=True)
async def test_c5_a_recall_killed_after_its_log_write_is_finished_by_the_restarted_node(
    crash_node: QimDeployment,
) -> None:
    acme = crash_node.tenants["acme"]
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol)
    a = await alice.connect()
    target = await send_text(a, group, "regret")
    await send_text(a, group, "fine")
    await die_in_the_window(crash_node, recall(a, group, 1))
    await acme.close_clients()
    # Died between the commits: the event is logged, the row is not recalled yet.
    assert crash_node.db.count("qim_messagerecord", "conversation_id = ? AND content_type = 'qim.recall.v1'", (group,)) == 1
    assert row_state(crash_node, group, 1)[:2] == ("normal", None)
    assert lost_recalls(crash_node) == 1

    crash_node.node.start(extra_env=NO_FAULT)
    assert lost_recalls(crash_node) == 0
    assert row_state(crash_node, group, 1)[:3] == ("recalled", 3, None)
    for member in (alice, bob, carol):
        client = await member.connect()
        row = (await history_by_seq(client, group))[1]
        assert row["state"] == "recalled" and row["payload"] is None and row["preview"] == "[recalled]"
        synced = await controls(client, "qim.recall.v1", group)
        if member is alice:
            assert synced == []  # the recalling device; its retry answers the same event:
            assert (await recall(client, group, 1))["event_conversation_seq"] == 3
        else:
            assert [(c["conversation_seq"], c["target_conversation_seq"]) for c in synced] == [(3, 1)]
            assert synced[0]["payload"] == {"target_message_id": target["message_id"]}
    assert crash_node.db.count("qim_messagerecord", "conversation_id = ?", (group,)) == 3
    await acme.close_clients()


@pytest.mark.parametrize("crash_node", [("edit.after_log", {})], indirect=True)
async def test_c5_an_edit_killed_after_its_log_write_is_finished_by_the_restarted_node(
    crash_node: QimDeployment,
) -> None:
    acme = crash_node.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "teh")
    await die_in_the_window(
        crash_node, a.request("EDIT", conversation_id=group, conversation_seq=1, payload={"text": "the"})
    )
    await acme.close_clients()
    assert row_state(crash_node, group, 1) == ("normal", None, '{"text":"teh"}', None)

    crash_node.node.start(extra_env=NO_FAULT)
    assert row_state(crash_node, group, 1) == ("edited", None, '{"text":"the"}', 2)
    b = await bob.connect()
    row = (await history_by_seq(b, group))[1]
    assert row["state"] == "edited" and row["payload"] == {"text": "the"} and "edited_at_ms" in row
    synced = await controls(b, "qim.edit.v1", group)
    assert [(c["target_conversation_seq"], c["payload"]) for c in synced] == [(1, {"text": "the"})]
    assert (await history_by_seq(await alice.connect(), group))[1]["payload"] == {"text": "the"}
    await acme.close_clients()


@pytest.mark.parametrize(
    "crash_node", [("read_sync.before_flush", {"QIM_READ_SYNC_MERGE_WINDOW_S": "1"})], indirect=True
)
async def test_c5_a_read_sync_killed_before_its_flush_reaches_the_other_device_after_restart(
    crash_node: QimDeployment,
) -> None:
    acme = crash_node.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    sender = await bob.connect()
    for i in range(6):
        await send_text(sender, group, f"m{i}")
    a = await alice.connect(device_id="phone-a")
    await mark_read(a, group, 2)
    await mark_read(a, group, 5)  # merged into the same window: the final position is 5
    assert crash_node.node.wait_exit(timeout=10) == KILLED  # the flush timer hit the fault
    await acme.close_clients()
    assert read_entries(crash_node, "acme", alice.user_id, group) == []
    assert crash_node.db.count("qim_pendingreadsync") == 1

    crash_node.node.start(extra_env=NO_FAULT)
    assert crash_node.db.count("qim_pendingreadsync") == 0
    b = await alice.connect(device_id="tablet-b")
    assert [c["read_conversation_seq"] for c in await controls(b, "qim.read.v1", group)] == [5]
    assert (await b.request("CONVERSATIONS"))["items"][0]["unread"] == 1
    a = await alice.connect(device_id="phone-a")
    assert await controls(a, "qim.read.v1", group) == []  # still never to the marking device
    await acme.close_clients()


@pytest.mark.parametrize("crash_node", [("recall.after_log", {})], indirect=True)
async def test_qim_recover_finishes_a_killed_recall_without_a_node(crash_node: QimDeployment) -> None:
    acme = crash_node.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "regret")
    await die_in_the_window(crash_node, recall(a, group, 1))
    await acme.close_clients()

    assert manage_without_fault(crash_node, "qim_recover") == {"recalls": 1, "edits": 0, "read_syncs": 0}
    assert lost_recalls(crash_node) == 0
    assert manage_without_fault(crash_node, "qim_recover") == {"recalls": 0, "edits": 0, "read_syncs": 0}
    crash_node.node.start(extra_env=NO_FAULT)
    b = await bob.connect()
    assert (await history_by_seq(b, group))[1]["state"] == "recalled"
    await acme.close_clients()


async def test_c5_on_two_nodes_the_restarted_node_re_issues_the_event_to_members_online_elsewhere(
    postgres, pg_template, redis_proc, work_dir  # type: ignore[no-untyped-def]
) -> None:
    cluster = start_cluster(postgres, pg_template, redis_proc, work_dir)
    try:
        n1, n2 = cluster.nodes
        n1.stop()
        n1.start(extra_env={"QIM_FAULT": "recall.after_log"})
        acme = cluster.tenants["acme"]
        alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
        group = create_group(alice, bob, carol)
        a = await alice.connect(n1)
        b, c = await bob.connect(n2), await carol.connect(n2)
        await send_text(a, group, "regret")
        for client in (b, c):
            await drop_pushes(client)
        with pytest.raises(ConnectionLost):
            await recall(a, group, 1)
        assert n1.wait_exit() == KILLED
        await asyncio.sleep(0.5)
        assert [f for f in b.drain_pushes() if f["type"] == "EVENT"] == []  # nothing left before step 2
        assert lost_recalls(cluster) == 1
        assert [stored_badge(cluster, p) for p in (bob, carol)] == [1, 1]  # step 1 leaves badges alone

        n1.start(extra_env=NO_FAULT)
        for client in (b, c):  # online on node 2 the whole time: the re-issued EVENT reaches them
            event = await next_control(client, "qim.recall.v1", timeout=10)
            assert (event["control"]["conversation_seq"], event["control"]["target_conversation_seq"]) == (2, 1)
            assert (await history_by_seq(client, group))[1]["state"] == "recalled"
        assert lost_recalls(cluster) == 0
        assert [stored_badge(cluster, p) for p in (bob, carol)] == [0, 0]  # PostgreSQL: lowered by step 2
    finally:
        await cluster.tenants["acme"].close_clients()
        cluster.stop()


async def test_c5_on_two_nodes_the_live_node_finishes_a_recall_its_dead_peer_left(
    postgres, pg_template, redis_proc, work_dir  # type: ignore[no-untyped-def]
) -> None:
    """Node 1 dies between a recall's two commits and stays dead: node 2's periodic pass
    (QIM_RECOVERY_INTERVAL_S, 1 s here) finishes it once the event is SETTLE_MS old."""
    cluster = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env={"QIM_RECOVERY_INTERVAL_S": "1"})
    try:
        n1, n2 = cluster.nodes
        n1.stop()
        n1.start(extra_env={"QIM_FAULT": "recall.after_log"})
        acme = cluster.tenants["acme"]
        alice, bob = acme.persona("alice"), acme.persona("bob")
        group = create_group(alice, bob)
        a, b = await alice.connect(n1), await bob.connect(n2)
        await send_text(a, group, "regret")
        await drop_pushes(b)
        with pytest.raises(ConnectionLost):
            await recall(a, group, 1)
        assert n1.wait_exit() == KILLED
        assert lost_recalls(cluster) == 1

        event = await next_control(b, "qim.recall.v1", timeout=20)  # node 1 is still dead
        assert (event["control"]["conversation_seq"], event["control"]["target_conversation_seq"]) == (2, 1)
        assert lost_recalls(cluster) == 0
        assert (await history_by_seq(b, group))[1]["state"] == "recalled"
    finally:
        await cluster.tenants["acme"].close_clients()
        cluster.stop()
