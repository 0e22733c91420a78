"""The registry enforced in SEND over real sockets, REGISTRY_GET and REGISTRY_UPDATED."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, history_texts, send_text
from tests.harness.personas import TenantHandle, api, api_ok

_names = itertools.count(1)


def register(tenant: TenantHandle, **fields) -> str:  # type: ignore[no-untyped-def]
    name = fields.pop("custom_type", None) or f"acme.t{next(_names)}.v1"
    body = {"custom_type": name, "preview_template": "[custom from {sender_id}]", "max_payload_bytes": 256, **fields}
    api_ok(tenant.node, "POST", "registry/types", tenant.admin_token, json=body)
    return name


async def send(client, group: str, content_type: str, payload, **extra) -> dict:  # type: ignore[no-untyped-def]
    return await client.request("SEND", conversation_id=group, client_msg_id=f"c{next(_names)}",
                                content_type=content_type, payload=payload, **extra)


async def test_a_registered_type_is_sent_and_rendered_from_its_template(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    name = register(acme)
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    ack = await send(a, group, name, {"question": "lunch?", "options": [1, 2]})
    assert ack["conversation_seq"] == 1
    event = (await b.next_push(timeout=5, type="EVENT"))["event"]
    assert event["message"]["content_type"] == name
    assert event["message"]["payload"] == {"question": "lunch?", "options": [1, 2]}
    assert event["message"]["preview"] == f"[custom from {alice.user_id}]"
    listing = await b.request("CONVERSATIONS")
    assert next(i for i in listing["items"] if i["conversation_id"] == group)["preview"] == f"[custom from {alice.user_id}]"


async def test_unknown_disabled_oversized_and_aggregate_types_are_refused(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice = acme.persona("alice")
    group = create_group(alice, acme.persona("bob"))
    a = await alice.connect()
    small = register(acme, max_payload_bytes=20)
    gone = register(acme)
    api_ok(acme.node, "DELETE", f"registry/types/{gone}", acme.admin_token)
    aggregate = register(acme, delivery_class="ephemeral_aggregate", counts_unread=False,
                         affects_session_order=False, timeline_visible=False, anchor_mode="anchor_target")
    await asyncio.sleep(1.2)  # older than QIM_REGISTRY_MAX_AGE_S: the node re-reads even without a notice
    cases = [
        ("acme.never.v1", {}, "unknown_custom_type"),
        (gone, {}, "unknown_custom_type"),
        (small, {"x": "y" * 30}, "too_large"),
        (aggregate, {}, "unknown_custom_type"),
        ("qim.call_record.v1", {}, "unknown_custom_type"),
    ]
    for content_type, payload, code in cases:
        with pytest.raises(QimError) as refused:
            await send(a, group, content_type, payload)
        assert refused.value.code == code, content_type
    assert embedded.db.count("qim_messagerecord", "conversation_id = ?", (group,)) == 0
    assert (await send(a, group, small, {"x": "y"}))["conversation_seq"] == 1


async def test_an_old_message_of_a_disabled_type_keeps_rendering(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    name = register(acme, preview_template="[sticker]")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send(a, group, name, {"id": 7})
    api_ok(acme.node, "DELETE", f"registry/types/{name}", acme.admin_token)
    b = await bob.connect()
    batch = await b.request("HISTORY", conversation_id=group)
    assert [(m["content_type"], m["preview"], m["payload"]) for m in batch["messages"]] == [(name, "[sticker]", {"id": 7})]


async def test_ephemeral_types_reach_online_members_only_and_write_nothing(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    name = register(acme, delivery_class="ephemeral", counts_unread=False, affects_session_order=False,
                    timeline_visible=False, anchor_mode="none")
    group = create_group(alice, bob, carol)
    a, b = await alice.connect(), await bob.connect()
    ack = await send(a, group, name, {"x": 1, "y": 2})
    assert ack["type"] == "ACK" and "conversation_seq" not in ack and ack["message_id"]
    frame = await b.next_push(timeout=5, type="EPHEMERAL")
    assert {k: frame[k] for k in ("conversation_id", "sender_id", "sender_device_id", "content_type", "payload")} == {
        "conversation_id": group, "sender_id": alice.user_id, "sender_device_id": "phone",
        "content_type": name, "payload": {"x": 1, "y": 2}}
    assert frame["sent_at_ms"] == ack["sent_at_ms"]
    await asyncio.sleep(0.2)
    assert [f for f in a.drain_pushes() if f["type"] == "EPHEMERAL"] == []
    c = await carol.connect()
    assert (await c.request("SYNC", after_mailbox_seq=0))["events"] == []
    assert embedded.db.count("qim_messagerecord", "conversation_id = ?", (group,)) == 0


async def test_type_flags_drive_unread_history_and_order(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    silent = register(acme, counts_unread=False, affects_session_order=False, timeline_visible=False)
    quiet = register(acme, counts_unread=False)
    group, other = create_group(alice, bob, title="g"), create_group(alice, bob, title="other")
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "hello")               # 1: counts, reorders, row
    await send_text(a, other, "later")               # other conversation is now newer
    await send(a, group, silent, {"k": 1})           # 2: no count, no reorder, no row
    await send(a, group, quiet, {"k": 2})            # 3: no count, but reorders and is a row
    assert await history_texts(b, group) == [(1, "hello"), (3, quiet)]
    listing = await b.request("CONVERSATIONS")
    ids = [i["conversation_id"] for i in listing["items"]]
    item = next(i for i in listing["items"] if i["conversation_id"] == group)
    assert item["unread"] == 1 and ids.index(group) < ids.index(other)


async def test_e2ee_conversations_get_the_placeholder_not_content(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = api_ok(acme.node, "POST", "conversations", alice.token(),
                   json={"kind": "group", "title": "secret", "member_user_ids": [bob.user_id], "e2ee": True})["conversation_id"]
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "ciphertext-ish")
    event = (await b.next_push(timeout=5, type="EVENT"))["event"]
    assert event["message"]["preview"] == "[message]"
    assert "ciphertext" not in str((await b.request("CONVERSATIONS"))["items"])


async def test_registry_get_and_registry_updated(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    a = await alice.connect()
    start = await a.request("REGISTRY_GET")
    assert start["type"] == "REGISTRY" and start["registry_version"] == a.auth_ok["registry_version"]
    assert "qim.membership.v1" in {t["custom_type"] for t in start["types"]}
    name = register(acme, minimum_client_version="2.1")
    update = await a.next_push(timeout=5, type="REGISTRY_UPDATED")
    assert update["registry_version"] > start["registry_version"]
    since = await a.request("REGISTRY_GET", since_version=start["registry_version"])
    assert [t["custom_type"] for t in since["types"]] == [name]
    assert since["types"][0]["minimum_client_version"] == "2.1"


async def test_anchor_target_types_need_a_target_and_do_not_move_the_list(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    vote = register(acme, anchor_mode="anchor_target", counts_unread=False, timeline_visible=False)
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "poll")
    with pytest.raises(QimError) as refused:
        await send(a, group, vote, {"choice": 1})
    assert refused.value.code == "bad_frame"
    with pytest.raises(QimError) as refused:
        await send(a, group, vote, {"choice": 1}, target_conversation_seq=99)
    assert refused.value.code == "not_found"
    b = await bob.connect()
    ack = await send(a, group, vote, {"choice": 1}, target_conversation_seq=1)
    assert ack["conversation_seq"] == 2
    pushed = (await b.next_push(timeout=5, type="EVENT"))["event"]["message"]
    while pushed["conversation_seq"] != 2:
        pushed = (await b.next_push(timeout=5, type="EVENT"))["event"]["message"]
    assert (pushed["content_type"], pushed["target_conversation_seq"]) == (vote, 1)
    synced = {e["message"]["conversation_seq"]: e["message"] for e in (await b.request("SYNC", after_mailbox_seq=0))["events"]
              if e["conversation_id"] == group}
    assert synced[2]["target_conversation_seq"] == 1 and "target_conversation_seq" not in synced[1]
    item = next(i for i in (await a.request("CONVERSATIONS"))["items"] if i["conversation_id"] == group)
    assert item["preview"] == "poll"
    bad = api(acme.node, "POST", "registry/types", acme.admin_token, json={"custom_type": "acme.bad.v1", "max_payload_bytes": 999999})
    assert bad.status_code == 400


async def test_a_tenant_admin_can_make_membership_events_count(acme: TenantHandle) -> None:
    """protocol.md §9.2: a built-in type's counts_unread is the tenant's to change, and the
    server writes membership events by it from then on (joins count as unread)."""
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    group = create_group(alice, bob)
    b = await bob.connect()

    async def bobs_unread() -> int:
        listing = await b.request("CONVERSATIONS")
        return next(i["unread"] for i in listing["items"] if i["conversation_id"] == group)

    assert await bobs_unread() == 0
    api_ok(acme.node, "PATCH", "registry/types/qim.membership.v1", acme.admin_token, json={"counts_unread": True})
    try:
        await asyncio.sleep(1.2)  # every node applies a registry change within 1 s
        api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [carol.user_id]})
        assert await bobs_unread() == 1
    finally:
        api_ok(acme.node, "PATCH", "registry/types/qim.membership.v1", acme.admin_token, json={"counts_unread": False})
        await asyncio.sleep(1.2)
