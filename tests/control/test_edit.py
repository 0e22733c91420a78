"""EDIT over real sockets on the embedded default: the event, the row, the preview, and the
refusals (someone else's, recalled, too large, wrong shape) that write nothing."""

from __future__ import annotations

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.control.control_helpers import (
    controls,
    drop_pushes,
    edit,
    history_by_seq,
    list_item,
    next_control,
    pushed_controls,
    recall,
    table_counts,
)
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle

EDIT = "qim.edit.v1"


async def test_an_edit_gives_everyone_the_new_payload_and_the_row_takes_it(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    phone = await alice.connect(device_id="phone")
    laptop = await alice.connect(device_id="laptop")
    b = await bob.connect()
    await send_text(phone, group, "helo")
    await send_text(b, group, "hi")
    for client in (phone, laptop, b):
        await drop_pushes(client)

    ack = await edit(phone, group, 1, "hello")
    assert ack["event_conversation_seq"] == 3
    for client in (b, laptop):
        event = await next_control(client, EDIT)
        assert event["control"] == {
            "custom_type": EDIT, "conversation_seq": 3, "target_conversation_seq": 1,
            "actor_id": alice.user_id, "origin_device_id": "phone", "payload": {"text": "hello"},
        }
    assert await pushed_controls(phone, EDIT) == []
    assert len(await controls(b, EDIT, group)) == 1 and await controls(phone, EDIT, group) == []

    rows = await history_by_seq(b, group)
    assert sorted(rows) == [1, 2]
    assert rows[1]["state"] == "edited" and rows[1]["payload"] == {"text": "hello"}
    assert rows[1]["edited_at_ms"] >= rows[1]["sent_at_ms"]
    assert (await list_item(b, group))["unread"] == 1  # an edit is not a new unread message

    await edit(phone, group, 1, "hello!")
    rows = await history_by_seq(b, group)
    assert rows[1]["payload"] == {"text": "hello!"} and rows[1]["state"] == "edited"
    assert embedded.db.query(
        "SELECT edit_event_conversation_seq FROM qim_messagerecord WHERE conversation_id = ? AND conversation_seq = 1",
        (group,),
    )[0][0] == 4

    await send_text(b, group, "latest")
    await edit(phone, group, 1, "late edit")
    assert (await list_item(b, group))["preview"] == "latest"  # an edit never moves the list


async def test_the_preview_shows_an_edited_latest_message(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "typo")
    await edit(a, group, 1, "fixed")
    assert (await list_item(b, group))["preview"] == "fixed"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"payload": {"text": "x" * 40_000}}, "too_large"),
        ({"payload": {"text": 5}}, "bad_frame"),
        ({"payload": "just a string"}, "bad_frame"),
        ({"payload": None}, "bad_frame"),
        ({"payload": {"txt": "x"}}, "bad_frame"),
        ({"conversation_seq": "1"}, "bad_frame"),
        ({"conversation_seq": 0}, "bad_frame"),
        ({"conversation_id": ["a"]}, "bad_frame"),
        ({"conversation_seq": 42}, "not_found"),
    ],
)
async def test_bad_edits_are_refused_and_write_nothing(
    embedded: QimDeployment, acme: TenantHandle, fields: dict, code: str
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "original")
    counts = await table_counts(embedded)
    with pytest.raises(QimError) as refused:
        await a.request("EDIT", **{"conversation_id": group, "conversation_seq": 1, "payload": {"text": "y"}, **fields})
    assert refused.value.code == code
    assert await table_counts(embedded) == counts
    assert (await history_by_seq(a, group))[1]["payload"] == {"text": "original"}


async def test_a_frame_without_payload_is_a_bad_frame(embedded: QimDeployment, acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    group = create_group(alice, acme.persona("bob"))
    a = await alice.connect()
    await send_text(a, group, "original")
    counts = await table_counts(embedded)
    with pytest.raises(QimError) as refused:
        await a.request("EDIT", conversation_id=group, conversation_seq=1)
    assert refused.value.code == "bad_frame"
    assert await table_counts(embedded) == counts


async def test_only_the_sender_edits_and_a_recalled_message_stays_recalled(
    embedded: QimDeployment, acme: TenantHandle, globex: TenantHandle
) -> None:
    alice, bob, eve = (acme.persona(n) for n in ("alice", "bob", "eve"))
    group = create_group(alice, bob)
    a, b, e = await alice.connect(), await bob.connect(), await eve.connect()
    m = await globex.persona("mallory").connect()
    await send_text(a, group, "alice's")
    counts = await table_counts(embedded)
    for client, code in ((b, "forbidden"), (e, "forbidden"), (m, "not_found")):
        with pytest.raises(QimError) as refused:
            await edit(client, group, 1, "mine now")
        assert refused.value.code == code
    assert await table_counts(embedded) == counts

    await recall(a, group, 1)
    counts = await table_counts(embedded)
    with pytest.raises(QimError) as refused:
        await edit(a, group, 1, "undo the recall?")
    assert refused.value.code == "conflict"
    assert await table_counts(embedded) == counts
    row = (await history_by_seq(b, group))[1]
    assert row["state"] == "recalled" and row["payload"] is None


async def test_a_retried_edit_answers_the_same_event_and_writes_nothing_twice(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    """EDIT carries no idempotency key: a client that lost the ACK sends the same EDIT again
    and must get the same event, not a second edit event for every member."""
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "helo")
    await drop_pushes(b)

    first = await edit(a, group, 1, "hello")
    counts = await table_counts(embedded)
    again = await (await alice.connect(device_id="phone")).request(
        "EDIT", conversation_id=group, conversation_seq=1, payload={"text": "hello"}
    )
    assert again["event_conversation_seq"] == first["event_conversation_seq"] == 2
    assert await table_counts(embedded) == counts
    assert [c["payload"] for c in await pushed_controls(b, EDIT)] == [{"text": "hello"}]
    assert [c["conversation_seq"] for c in await controls(b, EDIT, group)] == [2]

    # A different payload is a new edit; going back to an earlier one is one too.
    assert (await edit(a, group, 1, "hello!"))["event_conversation_seq"] == 3
    assert (await edit(a, group, 1, "hello"))["event_conversation_seq"] == 4
    assert (await history_by_seq(b, group))[1]["payload"] == {"text": "hello"}


async def test_an_edit_that_changes_mentions_pushes_the_new_set_as_sync_gives_it(acme: TenantHandle) -> None:
    # §17.2: the edit event carries the message's new mentions, in the EVENT push as in SYNC.
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "lunch?")
    await drop_pushes(b)
    await a.request("EDIT", conversation_id=group, conversation_seq=1, payload={"text": "@bob lunch?"},
                    mentions=[bob.user_id])
    pushed = (await next_control(b, EDIT))["control"]
    assert pushed["mentions"] == [bob.user_id] and pushed["mention_all"] is False
    assert await controls(b, EDIT, group) == [pushed]
