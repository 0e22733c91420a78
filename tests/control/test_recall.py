"""RECALL over real sockets on the embedded default: who is told, what the row becomes, the
list projection (preview repair, unread, order), retries, and refusals that write nothing."""

from __future__ import annotations

import asyncio

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.control.control_helpers import (
    controls,
    history_by_seq,
    list_item,
    mark_read,
    next_control,
    pushed_controls,
    recall,
    stored_badge,
    table_counts,
)
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle, api_ok

RECALL = "qim.recall.v1"


async def test_a_recall_reaches_everyone_who_saw_the_target_but_never_the_recalling_device(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    group = create_group(alice, bob, dave)
    phone = await alice.connect(device_id="phone")
    await send_text(phone, group, "one")                                         # seq 1
    target = await send_text(phone, group, "oops")                               # seq 2
    api_ok(acme.node, "DELETE", f"conversations/{group}/members/{dave.user_id}", dave.token())  # seq 3
    api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [carol.user_id]})  # seq 4
    laptop = await alice.connect(device_id="laptop")
    b, c, d = await bob.connect(), await carol.connect(), await dave.connect()
    await asyncio.sleep(0.3)
    for client in (phone, laptop, b, c, d):
        client.drain_pushes()

    ack = await recall(phone, group, 2)
    assert ack["type"] == "ACK" and ack["event_conversation_seq"] == 5

    for client in (b, laptop, d):  # dave left after seq 2: he saw it, so he is told
        event = await next_control(client, RECALL)
        assert event["conversation_id"] == group
        assert event["control"] == {
            "custom_type": RECALL, "conversation_seq": 5, "target_conversation_seq": 2,
            "actor_id": alice.user_id, "origin_device_id": "phone",
            "payload": {"target_message_id": target["message_id"]},
        }
    assert await pushed_controls(phone, RECALL) == []   # the ACK told it; no echo
    assert await pushed_controls(c, RECALL, settle_s=0) == []  # carol joined after seq 2
    assert len(await controls(b, RECALL, group)) == 1
    assert len(await controls(laptop, RECALL, group)) == 1
    assert await controls(phone, RECALL, group) == []
    assert await controls(c, RECALL, group) == []

    rows = await history_by_seq(b, group)
    assert sorted(rows) == [1, 2, 3, 4]  # the recall event takes seq 5 but adds no row
    assert rows[2]["state"] == "recalled" and rows[2]["payload"] is None and rows[2]["preview"] == "[recalled]"
    assert rows[1]["state"] == "normal" and rows[1]["payload"] == {"text": "one"}
    state, event_seq, payload = embedded.db.query(
        "SELECT state, recall_event_conversation_seq, payload FROM qim_messagerecord WHERE message_id = ?",
        (target["message_id"],),
    )[0]
    assert (state, event_seq, payload) == ("recalled", 5, None)


async def test_recalls_repair_the_preview_and_unread_but_never_move_the_conversation(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob, title="recalls")
    later = create_group(alice, bob, title="later")
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "first")      # seq 1
    await send_text(a, group, "second")     # seq 2
    await asyncio.sleep(0.01)
    await send_text(a, later, "elsewhere")  # `later` is now the newest conversation
    before = await list_item(b, group)
    assert (before["unread"], before["preview"]) == (2, "second")

    await recall(a, group, 2)
    item = await list_item(b, group)
    assert (item["unread"], item["preview"]) == (1, "[recalled]")
    assert item["last_activity_ms"] == before["last_activity_ms"]

    await recall(a, group, 1)  # two recalls in a row: the preview still anchors on seq 2
    item = await list_item(b, group)
    assert (item["unread"], item["preview"]) == (0, "[recalled]")
    assert item["last_activity_ms"] == before["last_activity_ms"]
    ids = [i["conversation_id"] for i in (await b.request("CONVERSATIONS"))["items"]]
    assert ids.index(later) < ids.index(group)  # recall events never reorder the list

    third = await send_text(a, group, "third")
    assert (await list_item(b, group))["preview"] == "third"
    await recall(a, group, third["conversation_seq"])
    item = await list_item(b, group)
    assert (item["unread"], item["preview"]) == (0, "[recalled]")


async def test_a_repeated_recall_answers_the_same_event_and_writes_nothing(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "twice")
    first = await recall(a, group, 1)
    counts = await table_counts(embedded)
    again = await recall(a, group, 1)
    assert again["event_conversation_seq"] == first["event_conversation_seq"]
    assert await table_counts(embedded) == counts
    assert embedded.db.count(
        "qim_messagerecord", "conversation_id = ? AND content_type = ?", (group, RECALL)
    ) == 1


async def test_the_senders_own_messages_carry_their_deadlines_in_history_and_sync(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    phone = await alice.connect(device_id="phone")
    ack = await send_text(phone, group, "mine")
    b = await bob.connect()
    await send_text(b, group, "his")
    laptop = await alice.connect(device_id="laptop")

    mine = (await history_by_seq(phone, group))
    assert mine[1]["recallable_until_ms"] == ack["sent_at_ms"] + 120_000
    assert mine[1]["editable_until_ms"] == ack["sent_at_ms"] + 900_000
    assert "recallable_until_ms" not in mine[2] and "editable_until_ms" not in mine[2]
    theirs = await history_by_seq(b, group)
    assert "recallable_until_ms" not in theirs[1] and "editable_until_ms" not in theirs[1]
    events = (await laptop.request("SYNC", after_mailbox_seq=0))["events"]
    synced = {e["message"]["conversation_seq"]: e["message"] for e in events if e["conversation_id"] == group}
    assert synced[1]["recallable_until_ms"] == ack["sent_at_ms"] + 120_000
    assert "recallable_until_ms" not in synced[2]

    await recall(phone, group, 1)
    assert "recallable_until_ms" not in (await history_by_seq(phone, group))[1]


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"conversation_seq": "1"}, "bad_frame"),
        ({"conversation_seq": 1.5}, "bad_frame"),
        ({"conversation_seq": True}, "bad_frame"),
        ({"conversation_seq": 0}, "bad_frame"),
        ({"conversation_seq": -1}, "bad_frame"),
        ({"conversation_seq": None}, "bad_frame"),
        ({"conversation_id": 7}, "bad_frame"),
        ({"conversation_id": ""}, "bad_frame"),
        ({"conversation_seq": 99}, "not_found"),
        ({"conversation_seq": 3}, "not_found"),  # the membership event: not a message
        ({"conversation_id": "01HZZZZZZZZZZZZZZZZZZZZZZZ"}, "not_found"),
    ],
)
async def test_bad_recalls_are_refused_and_write_nothing(
    embedded: QimDeployment, acme: TenantHandle, fields: dict, code: str
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "keep")  # seq 1
    await send_text(a, group, "keep too")  # seq 2
    api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [acme.persona("x").user_id]})
    counts = await table_counts(embedded)
    with pytest.raises(QimError) as refused:
        await a.request("RECALL", **{"conversation_id": group, "conversation_seq": 1, **fields})
    assert refused.value.code == code
    assert await table_counts(embedded) == counts


async def test_only_the_sender_recalls_and_other_tenants_find_nothing(
    embedded: QimDeployment, acme: TenantHandle, globex: TenantHandle
) -> None:
    alice, bob, eve = (acme.persona(n) for n in ("alice", "bob", "eve"))
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "alice's")
    b, e, m = await bob.connect(), await eve.connect(), await globex.persona("mallory").connect()
    counts = await table_counts(embedded)
    for client, code in ((b, "forbidden"), (e, "forbidden"), (m, "not_found")):
        with pytest.raises(QimError) as refused:
            await recall(client, group, 1)
        assert refused.value.code == code
    assert await table_counts(embedded) == counts
    assert (await history_by_seq(b, group))[1]["state"] == "normal"


async def test_a_recall_physically_deletes_the_messages_reactions(embedded: QimDeployment, acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "react to me")
    await send_text(a, group, "and me")
    for seq in (1, 2):
        await b.request("REACT", conversation_id=group, conversation_seq=seq, reaction_key="+1", action="add")
    where = "conversation_id = ? AND conversation_seq = ?"
    assert embedded.db.count("reactions_messagereactionsummary", where, (group, 1)) == 1
    assert embedded.db.count("reactions_messagereaction", where, (group, 1)) == 1

    await recall(a, group, 1)
    assert embedded.db.count("reactions_messagereactionsummary", where, (group, 1)) == 0
    assert embedded.db.count("reactions_messagereaction", where, (group, 1)) == 0
    assert embedded.db.count("reactions_messagereactionsummary", where, (group, 2)) == 1  # others keep theirs
    rows = await history_by_seq(b, group)
    assert "reactions" not in rows[1] and rows[2]["reactions"]["counts"] == {"+1": 1}


async def test_a_recall_lowers_the_stored_badge_of_those_who_had_it_unread(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    """The stored badge (what pushes carry) stays definitional: the recalled message leaves
    it for readers whose cursor was before it; not for its sender, a reader past it, a member
    who joined after it, or anyone's other unread."""
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    group, elsewhere = create_group(alice, bob, carol), create_group(bob, dave, title="elsewhere")
    phone = await alice.connect()
    await send_text(phone, group, "one")                                                     # seq 1
    await send_text(phone, group, "oops")                                                    # seq 2
    await send_text(await bob.connect(), elsewhere, "for dave")
    await mark_read(await carol.connect(), group, 2)
    api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [dave.user_id]})

    def badges() -> dict[str, int]:
        return {p.user_id: stored_badge(embedded, p) for p in (alice, bob, carol, dave)}

    assert badges() == {alice.user_id: 0, bob.user_id: 2, carol.user_id: 0, dave.user_id: 1}
    await recall(phone, group, 2)
    assert badges() == {alice.user_id: 0, bob.user_id: 1, carol.user_id: 0, dave.user_id: 1}
    for persona in (alice, bob, carol, dave):  # the stored badge and the definitional one agree
        listing = await (await persona.connect(device_id="check")).request("CONVERSATIONS")
        assert listing["badge"] == badges()[persona.user_id]
    await recall(phone, group, 2)  # a retry changes nothing more
    assert badges()[bob.user_id] == 1
