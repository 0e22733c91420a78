"""Shared steps of control-event tests: mark read, recall, edit, and counting rows as an operator."""

from __future__ import annotations

import asyncio
import time

from qimclient import QimClient
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import sync_all
from tests.harness.personas import Persona


async def mark_read(client: QimClient, conversation_id: str, seq: int) -> dict:
    return await client.request("MARK_READ", conversation_id=conversation_id, read_conversation_seq=seq)


async def recall(client: QimClient, conversation_id: str, seq: int) -> dict:
    return await client.request("RECALL", conversation_id=conversation_id, conversation_seq=seq)


async def edit(client: QimClient, conversation_id: str, seq: int, text: str) -> dict:
    return await client.request("EDIT", conversation_id=conversation_id, conversation_seq=seq, payload={"text": text})


async def history_by_seq(client: QimClient, conversation_id: str) -> dict[int, dict]:
    batch = await client.request("HISTORY", conversation_id=conversation_id)
    return {m["conversation_seq"]: m for m in batch["messages"]}


async def list_item(client: QimClient, conversation_id: str) -> dict:
    listing = await client.request("CONVERSATIONS")
    return next(i for i in listing["items"] if i["conversation_id"] == conversation_id)


async def controls(client: QimClient, custom_type: str, conversation_id: str | None = None) -> list[dict]:
    """The control events of that type that SYNC gives this device, from the beginning."""
    events, _ = await sync_all(client)
    return [
        e["control"] for e in events
        if e["kind"] == "control" and e["control"]["custom_type"] == custom_type
        and (conversation_id is None or e["conversation_id"] == conversation_id)
    ]


async def pushed_controls(client: QimClient, custom_type: str, settle_s: float = 0.3) -> list[dict]:
    """EVENT pushes of that control type queued so far (after `settle_s`), drained."""
    await asyncio.sleep(settle_s)
    return [
        f["event"]["control"] for f in client.drain_pushes()
        if f["type"] == "EVENT" and f["event"]["kind"] == "control"
        and f["event"]["control"]["custom_type"] == custom_type
    ]


async def drop_pushes(client: QimClient, settle_s: float = 0.2) -> None:
    """Let the pushes of a test's setup arrive, then drop them."""
    await asyncio.sleep(settle_s)
    client.drain_pushes()


async def next_control(client: QimClient, custom_type: str, timeout: float = 5.0) -> dict:
    """The next EVENT push carrying that control type (other pushes are skipped)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        frame = await client.next_push(timeout=max(0.01, deadline - loop.time()), type="EVENT")
        event = frame["event"]
        if event["kind"] == "control" and event["control"]["custom_type"] == custom_type:
            return event


def user_pk(deployment: QimDeployment, tenant: str, user_id: str) -> int:
    rows = deployment.db.query(
        "SELECT u.id FROM qim_user u JOIN qim_tenant t ON u.tenant_id = t.id WHERE t.name = ? AND u.username = ?",
        (tenant, user_id),
    )
    return rows[0][0]


def stored_badge(deployment: QimDeployment, persona: Persona) -> int:
    """The user's UserBadgeState.badge (0 before the row exists): what pushes carry."""
    pk = user_pk(deployment, persona.tenant.name, persona.user_id)
    rows = deployment.db.query("SELECT badge FROM qim_userbadgestate WHERE user_id = ?", (pk,))
    return rows[0][0] if rows else 0


def read_entries(deployment: QimDeployment, tenant: str, user_id: str, conversation_id: str) -> list[dict]:
    """The qim.read.v1 mailbox entries of a user in a conversation, as stored."""
    import json

    rows = deployment.db.query(
        "SELECT control, origin_device_id FROM qim_usermailboxentry WHERE user_id = ? AND conversation_id = ? "
        "AND kind = 'control' AND message_id IS NULL ORDER BY mailbox_seq",
        (user_pk(deployment, tenant, user_id), conversation_id),
    )
    return [
        {**(control if isinstance(control, dict) else json.loads(control)), "_origin": origin}
        for control, origin in rows
    ]


async def table_counts(deployment: QimDeployment) -> dict[str, int]:
    """Row counts of every table a control request could write, once the node is quiet.

    Read marks of earlier tests on the same node flush when their merge window ends, in the
    background (a mailbox row written, a pending row deleted); counting before they have would
    let a refusal look like a write. So wait for the pending rows to drain first (the windows are
    at most 3 s here; fails after 15 s)."""
    deadline = time.monotonic() + 15
    while (pending := deployment.db.count("qim_pendingreadsync")) > 0:
        assert time.monotonic() < deadline, f"{pending} read marks never flushed"
        await asyncio.sleep(0.1)
    tables = [
        "qim_messagerecord", "qim_usermailboxentry", "qim_readcursor", "qim_pendingreadsync",
        "qim_userbadgestate", "qim_moderationaudit", "qim_pushtask",
    ]
    counts = {table: deployment.db.count(table) for table in tables}
    counts["recalled"] = deployment.db.count("qim_messagerecord", "state = 'recalled'")
    counts["edited"] = deployment.db.count("qim_messagerecord", "state = 'edited'")
    return counts


def lost_recalls(deployment: QimDeployment) -> int:
    """Recall events whose target row never got its recall_event_conversation_seq (C-5)."""
    return deployment.db.query(
        "SELECT count(*) FROM qim_messagerecord e JOIN qim_messagerecord t "
        "ON t.conversation_id = e.conversation_id AND t.conversation_seq = e.target_conversation_seq "
        "WHERE e.content_type = 'qim.recall.v1' AND t.recall_event_conversation_seq IS NULL"
    )[0][0]
