"""Retention on the embedded setup (SQLite): what `qim_retention` deletes, the SYNC and
HISTORY answers from before the cut-off (`history_truncated`), the tenant setting over REST,
and the tenant wall. The run under concurrent SEND traffic is test_retention_postgres.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.core.conversation_helpers import create_group, send_text, sync_all
from tests.core.retention_helpers import age, by_tenant, log_seqs, mailbox_count, set_retention
from tests.harness.personas import TenantHandle, api

FAST = {"QIM_PER_USER_MSG_RATE": "1000", "QIM_PER_USER_REACTION_RATE": "1000"}


@pytest.fixture(scope="module")
def deployment(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=FAST)
    yield deployment
    deployment.stop()


@pytest.fixture
async def acme(deployment: QimDeployment) -> Iterator[TenantHandle]:
    handle = deployment.tenants["acme"]
    yield handle
    await handle.close_clients()
    set_retention(handle, 0)


@pytest.fixture
async def globex(deployment: QimDeployment) -> Iterator[TenantHandle]:
    handle = deployment.tenants["globex"]
    yield handle
    await handle.close_clients()
    set_retention(handle, 0)


async def until(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def texts(events: list[dict]) -> list[str]:
    return [e["message"]["payload"]["text"] for e in events if e["kind"] == "message" and e["message"]["payload"]]


async def test_sync_and_history_from_before_the_cut_off_answer_from_the_oldest_kept(
    deployment: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    old = [await send_text(a, group, f"old {i}") for i in range(10)]
    await b.request("REACT", conversation_id=group, conversation_seq=old[2]["conversation_seq"], reaction_key="+1", action="add")
    _, cursor_mid = await sync_all(b)
    aged = age(deployment.db, group)
    aged_entries = mailbox_count(deployment.db, group)
    new = [await send_text(a, group, f"new {i}") for i in range(5)]
    _, cursor_end = await sync_all(b)
    set_retention(acme, 24 * 3600)

    report = by_tenant(deployment.manage("qim_retention", "--tenant", "acme", "--batch", "3"))["acme"]

    assert report["dry_run"] is False and report["retention_s"] == 24 * 3600
    assert report["deleted"]["qim.MessageRecord"] == len(aged)
    assert report["deleted"]["qim.UserMailboxEntry"] >= aged_entries
    assert report["deleted"]["reactions.MessageReaction"] == 1
    assert report["deleted"]["reactions.MessageReactionSummary"] == 1
    assert log_seqs(deployment.db, group) == [n["conversation_seq"] for n in new]
    assert deployment.db.count("reactions_messagereactionsummary", "conversation_id = ?", (group,)) == 0

    first = await b.request("SYNC", after_mailbox_seq=0)
    assert first["history_truncated"] is True
    assert texts(first["events"]) == [f"new {i}" for i in range(5)]
    # From a cursor past the cut-off, or at the head, nothing is missing: no flag.
    from_mid = await b.request("SYNC", after_mailbox_seq=cursor_mid)
    assert "history_truncated" not in from_mid and texts(from_mid["events"]) == [f"new {i}" for i in range(5)]
    from_end = await b.request("SYNC", after_mailbox_seq=cursor_end)
    assert "history_truncated" not in from_end and from_end["events"] == []

    whole = await b.request("HISTORY", conversation_id=group)
    assert whole["history_truncated"] is True and whole["has_more"] is False
    assert [m["payload"]["text"] for m in whole["messages"]] == [f"new {i}" for i in range(5)]
    below = await b.request("HISTORY", conversation_id=group, before_seq=new[0]["conversation_seq"])
    assert below["messages"] == [] and below["history_truncated"] is True
    forwards = await b.request("HISTORY", conversation_id=group, after_seq=0, limit=2)
    assert forwards["history_truncated"] is True and len(forwards["messages"]) == 2
    newest = await b.request("HISTORY", conversation_id=group, limit=2)
    assert "history_truncated" not in newest and newest["has_more"] is True
    after_cut = await b.request("HISTORY", conversation_id=group, after_seq=aged[-1])
    assert "history_truncated" not in after_cut and len(after_cut["messages"]) == 5


async def test_a_mailbox_emptied_by_retention_says_so_to_a_sync_from_before(
    deployment: QimDeployment, acme: TenantHandle
) -> None:
    alice, carol = acme.persona("alice"), acme.persona("carol")
    group = create_group(alice, carol)
    a = await alice.connect()
    for i in range(3):
        await send_text(a, group, f"old {i}")
    age(deployment.db, group)
    set_retention(acme, 3600)
    deployment.manage("qim_retention", "--tenant", "acme")

    c = await carol.connect()
    answer = await c.request("SYNC", after_mailbox_seq=0)
    assert answer["events"] == [] and answer["has_more"] is False
    assert answer["history_truncated"] is True and answer["next_mailbox_seq"] == 0
    # A message after the purge comes after the hole, flagged from the old cursor only.
    await send_text(a, group, "fresh")
    again = await c.request("SYNC", after_mailbox_seq=0)
    assert texts(again["events"]) == ["fresh"] and again["history_truncated"] is True
    assert "history_truncated" not in await c.request("SYNC", after_mailbox_seq=again["next_mailbox_seq"])

    # The Python SDK's catch-up on connect notices the flag (and still hands on "fresh").
    sdk = await carol.connect(device_id="tablet", sync=True)
    await until(lambda: sdk.mailbox.catch_ups >= 1)
    assert sdk.mailbox.history_truncations == 1
    assert sdk.cursor == again["next_mailbox_seq"]


async def test_dry_run_counts_and_a_tenant_run_never_touches_another_tenant(
    deployment: QimDeployment, acme: TenantHandle, globex: TenantHandle
) -> None:
    groups = {}
    for tenant in (acme, globex):
        alice, bob = tenant.persona("alice"), tenant.persona("bob")
        groups[tenant.name] = create_group(alice, bob)
        a = await alice.connect()
        for i in range(4):
            await send_text(a, groups[tenant.name], f"{tenant.name} {i}")
        age(deployment.db, groups[tenant.name])
        set_retention(tenant, 3600)
    before = {name: (log_seqs(deployment.db, g), mailbox_count(deployment.db, g)) for name, g in groups.items()}

    dry = by_tenant(deployment.manage("qim_retention", "--tenant", "acme", "--dry-run"))["acme"]
    assert dry["dry_run"] is True
    assert dry["deleted"]["qim.MessageRecord"] >= len(before["acme"][0])
    assert {n: (log_seqs(deployment.db, g), mailbox_count(deployment.db, g)) for n, g in groups.items()} == before

    real = by_tenant(deployment.manage("qim_retention", "--tenant", "acme"))
    assert set(real) == {"acme"} and real["acme"]["deleted"]["qim.MessageRecord"] == dry["deleted"]["qim.MessageRecord"]
    assert log_seqs(deployment.db, groups["acme"]) == []
    assert (log_seqs(deployment.db, groups["globex"]), mailbox_count(deployment.db, groups["globex"])) == before["globex"]

    # Without --tenant every tenant with a retention runs; one keeping forever is left out.
    set_retention(acme, 0)
    everyone = by_tenant(deployment.manage("qim_retention"))
    assert "acme" not in everyone and everyone["globex"]["deleted"]["qim.MessageRecord"] == len(before["globex"][0])
    assert log_seqs(deployment.db, groups["globex"]) == []


def test_the_retention_setting_over_rest(acme: TenantHandle, globex: TenantHandle) -> None:
    dave = acme.persona("dave")
    assert api(acme.node, "GET", "tenant/settings", dave.token()).json() == {"tenant": "acme", "message_retention_s": 0}
    refused = api(acme.node, "PATCH", "tenant/settings", dave.token(), json={"message_retention_s": 60})
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden" and refused.json()["message"]
    for bad in ({"message_retention_s": -1}, {"message_retention_s": "soon"}, {"message_retention_s": 10**12}):
        answer = api(acme.node, "PATCH", "tenant/settings", acme.admin_token, json=bad)
        assert answer.status_code == 400 and answer.json()["code"] == "bad_request", bad
    assert set_retention(acme, 30 * 24 * 3600) == {"tenant": "acme", "message_retention_s": 30 * 24 * 3600}
    assert api(acme.node, "GET", "tenant/settings", dave.token()).json()["message_retention_s"] == 30 * 24 * 3600
    assert api(globex.node, "GET", "tenant/settings", globex.admin_token).json()["message_retention_s"] == 0
    assert api(acme.node, "GET", "tenant/settings").status_code == 401


def test_the_command_refuses_an_unknown_tenant_and_a_bad_batch(deployment: QimDeployment) -> None:
    for args, message in ((("--tenant", "nosuch"), "no tenant named 'nosuch'"), (("--batch", "0"), "--batch")):
        with pytest.raises(RuntimeError, match=message):
            deployment.manage("qim_retention", *args)
