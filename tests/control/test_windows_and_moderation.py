"""Self windows on a node with them shortened to 1.5 s, and the tenant admin's moderation
recall over REST (no window, audited, tenant walls)."""

from __future__ import annotations

import asyncio

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.control.control_helpers import (
    drop_pushes,
    edit,
    history_by_seq,
    next_control,
    recall,
    table_counts,
)
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle, api

WINDOW_MS = 1500


async def test_recall_and_edit_work_inside_their_windows_and_expire_after(
    short_windows: QimDeployment, short_acme: TenantHandle
) -> None:
    alice, bob = short_acme.persona("alice"), short_acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    early = await send_text(a, group, "quick")
    late = await send_text(a, group, "slow")
    mine = await history_by_seq(a, group)
    assert mine[2]["recallable_until_ms"] == late["sent_at_ms"] + WINDOW_MS
    assert mine[2]["editable_until_ms"] == late["sent_at_ms"] + WINDOW_MS
    await edit(a, group, early["conversation_seq"], "quick, edited")
    await recall(a, group, early["conversation_seq"])

    await asyncio.sleep(WINDOW_MS / 1000 + 0.2)
    counts = await table_counts(short_windows)
    for attempt in (recall(a, group, 2), edit(a, group, 2, "too late")):
        with pytest.raises(QimError) as refused:
            await attempt
        assert refused.value.code == "window_expired"
    assert await table_counts(short_windows) == counts
    row = (await history_by_seq(a, group))[2]
    assert row["state"] == "normal" and row["payload"] == {"text": "slow"}
    assert "recallable_until_ms" not in row and "editable_until_ms" not in row


def moderation_recall(tenant: TenantHandle, token: str, **body):  # type: ignore[no-untyped-def]
    return api(tenant.node, "POST", "moderation/recall", token, json=body)


async def test_a_tenant_admin_recalls_after_the_window_and_every_act_is_audited(
    short_windows: QimDeployment, short_acme: TenantHandle
) -> None:
    alice, bob = short_acme.persona("alice"), short_acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    target = await send_text(a, group, "spam")
    b = await bob.connect()
    await asyncio.sleep(WINDOW_MS / 1000 + 0.2)
    await drop_pushes(b)

    answer = moderation_recall(short_acme, short_acme.admin_token, conversation_id=group, conversation_seq=1, reason="spam")
    assert (answer.status_code, answer.json()) == (201, {"event_conversation_seq": 2})
    event = await next_control(b, "qim.recall.v1")
    assert event["control"]["actor_id"] == "admin" and event["control"]["target_conversation_seq"] == 1
    assert event["control"]["payload"] == {"target_message_id": target["message_id"], "moderated": True}
    row = (await history_by_seq(b, group))[1]
    assert row["state"] == "recalled" and row["payload"] is None

    again = moderation_recall(short_acme, short_acme.admin_token, conversation_id=group, conversation_seq=1)
    assert (again.status_code, again.json()) == (200, {"event_conversation_seq": 2})
    audit = short_windows.db.query(
        "SELECT actor, action, outcome, conversation_seq, message_id, event_conversation_seq, reason "
        "FROM qim_moderationaudit WHERE conversation_id = ? ORDER BY id",
        (group,),
    )
    assert audit == [
        ("user:admin", "recall", "recalled", 1, target["message_id"], 2, "spam"),
        ("user:admin", "recall", "already_recalled", 1, target["message_id"], 2, ""),
    ]
    assert short_windows.db.count("qim_messagerecord", "conversation_id = ?", (group,)) == 2


async def test_moderation_is_for_tenant_admins_of_the_conversations_tenant_only(
    short_windows: QimDeployment, short_acme: TenantHandle
) -> None:
    alice, bob = short_acme.persona("alice"), short_acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "keep")
    await send_text(a, group, "keep too")
    globex = short_windows.tenants["globex"]
    counts = await table_counts(short_windows)
    cases = [
        (alice.token(), {"conversation_id": group, "conversation_seq": 1}, 403, "forbidden"),
        (globex.admin_token, {"conversation_id": group, "conversation_seq": 1}, 404, "not_found"),
        (short_acme.admin_token, {"conversation_id": group, "conversation_seq": 99}, 404, "not_found"),
        (short_acme.admin_token, {"conversation_id": "nope", "conversation_seq": 1}, 404, "not_found"),
        (short_acme.admin_token, {"conversation_id": group, "conversation_seq": "x"}, 400, "bad_request"),
        (short_acme.admin_token, {"conversation_id": group, "conversation_seq": 0}, 400, "bad_request"),
        (short_acme.admin_token, {"conversation_id": group}, 400, "bad_request"),
        (None, {"conversation_id": group, "conversation_seq": 1}, 401, "unauthenticated"),
    ]
    for token, body, status, code in cases:
        answer = moderation_recall(short_acme, token, **body)
        assert (answer.status_code, answer.json()["code"]) == (status, code), (body, answer.text)
    assert await table_counts(short_windows) == counts
