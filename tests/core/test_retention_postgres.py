"""`qim_retention` on PostgreSQL while real clients on two nodes keep sending: every SEND is
acknowledged and kept, everything older than the cut-off is gone, and a device syncing from
the start gets every kept message with `history_truncated`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from qimclient import QimClient
from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group, send_text, sync_all
from tests.core.retention_helpers import age, by_tenant, log_seqs, set_retention
from tests.harness.services import PostgresServer

FAST = {"QIM_PER_USER_MSG_RATE": "1000", "QIM_PER_USER_REACTION_RATE": "1000"}


@pytest.fixture(scope="module")
def pg_cluster(postgres: PostgresServer, pg_template: str, redis_proc, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env=FAST)
    yield deployment
    deployment.stop()


async def keep_sending(client: QimClient, conversation_id: str, label: str, running: asyncio.Event,
                       acks: list[tuple[str, dict, bool]]) -> None:
    """Send until the run has ended and three more SENDs began after it; each ACK is recorded
    with whether the run was still going when it came back. A refused SEND raises."""
    n, after_run = 0, 0
    while after_run < 3:
        after_run += not running.is_set()
        text = f"{label} live {n}"
        ack = await send_text(client, conversation_id, text)
        acks.append((label, {**ack, "text": text, "conversation_id": conversation_id}, running.is_set()))
        n += 1


async def test_retention_under_concurrent_sends_keeps_every_new_message_and_no_old_one(pg_cluster: QimDeployment) -> None:
    acme = pg_cluster.tenants["acme"]
    first, second = pg_cluster.nodes
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    group, pair = create_group(alice, bob, carol), create_group(alice, bob, title="pair")
    a = await alice.connect(first)
    old = [await send_text(a, group, f"old {i}") for i in range(60)] + [await send_text(a, pair, f"old d{i}") for i in range(20)]
    b, c = await bob.connect(first), await carol.connect(second)
    for ack in old[:10]:
        await b.request("REACT", conversation_id=group, conversation_seq=ack["conversation_seq"], reaction_key="+1", action="add")
    aged = {group: age(pg_cluster.db, group), pair: age(pg_cluster.db, pair)}
    set_retention(acme, 3600)

    running, acks = asyncio.Event(), []
    running.set()
    senders = [asyncio.create_task(keep_sending(b, group, "bob", running, acks)),
               asyncio.create_task(keep_sending(c, group, "carol", running, acks)),
               asyncio.create_task(keep_sending(a, pair, "alice", running, acks))]
    while {label for label, _, _ in acks} != {"bob", "carol", "alice"}:
        await asyncio.sleep(0.05)  # every sender is going before the run starts
    try:
        stdout = await asyncio.to_thread(pg_cluster.manage, "qim_retention", "--tenant", "acme", "--batch", "5")
    finally:
        running.clear()
    await asyncio.wait_for(asyncio.gather(*senders), timeout=120)
    report = by_tenant(stdout)["acme"]

    during_run = sum(1 for _, _, during in acks if during)
    assert during_run > 0, "no SEND was acknowledged while the run went on"
    print(f"\nretention under traffic: {during_run} SENDs acknowledged during the run, report {report}")
    assert report["deleted"]["qim.MessageRecord"] == len(aged[group]) + len(aged[pair])
    assert report["deleted"]["reactions.MessageReaction"] == 10
    for conversation_id in (group, pair):
        sent = sorted(ack["conversation_seq"] for _, ack, _ in acks if ack["conversation_id"] == conversation_id)
        assert log_seqs(pg_cluster.db, conversation_id) == sent, "the log is not exactly what was sent since"
        assert min(sent) > max(aged[conversation_id])
    assert pg_cluster.db.count("qim_usermailboxentry", "created_at_ms < ? AND tenant_id = (SELECT id FROM qim_tenant WHERE name = 'acme')",
                               (report["cutoff_ms"],)) == 0
    assert pg_cluster.db.count("reactions_messagereactionsummary", "conversation_id = ?", (group,)) == 0

    # A new device of bob's syncs from the start: the hole is flagged, every live message is there.
    reader = await bob.connect(second, device_id="tablet")
    first_page = await reader.request("SYNC", after_mailbox_seq=0)
    assert first_page["history_truncated"] is True
    events, _ = await sync_all(reader)
    received = {e["message"]["message_id"] for e in events if e["kind"] == "message"}
    assert {ack["message_id"] for _, ack, _ in acks} <= received
    assert not any(e["message"]["payload"]["text"].startswith("old") for e in events if e["kind"] == "message")
    # Paged back to the start (a fast SEND path sends more than one page during the run): the
    # page that reaches the start says the older rows are gone.
    texts, before = [], {}
    while True:
        history = await reader.request("HISTORY", conversation_id=pair, limit=200, **before)
        texts = [m["payload"]["text"] for m in history["messages"]] + texts
        if not history["has_more"]:
            break
        before = {"before_seq": history["messages"][0]["conversation_seq"]}
    assert history["history_truncated"] is True
    assert texts == [
        ack["text"] for _, ack, _ in sorted(acks, key=lambda x: x[1]["conversation_seq"]) if ack["conversation_id"] == pair
    ]
