"""C-4, cross-device read sync over real sockets: the marking device never hears its own
event, the others do and recompute unread; one event per merge window; the cursor only moves
forward; the badge follows; refusals write nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.control.control_helpers import (
    controls,
    drop_pushes,
    list_item,
    mark_read,
    next_control,
    pushed_controls,
    read_entries,
    table_counts,
    user_pk,
)
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle

READ = "qim.read.v1"


async def test_c4_device_a_marks_read_and_only_device_b_hears_of_it(
    short_windows: QimDeployment, short_acme: TenantHandle
) -> None:
    alice, bob = short_acme.persona("alice"), short_acme.persona("bob")
    group = create_group(alice, bob)
    sender = await bob.connect()
    for i in range(3):
        await send_text(sender, group, f"m{i}")
    a = await alice.connect(device_id="phone-a")
    b = await alice.connect(device_id="tablet-b")
    assert (await list_item(b, group))["unread"] == 3
    for client in (a, b, sender):
        await drop_pushes(client)

    ack = await mark_read(a, group, 3)
    assert (ack["type"], ack["read_conversation_seq"], ack["unread"]) == ("ACK", 3, 0)
    event = await next_control(b, READ, timeout=5)
    assert event["conversation_id"] == group and event["kind"] == "control"
    assert event["control"] == {
        "custom_type": READ, "read_conversation_seq": 3, "actor_id": alice.user_id, "origin_device_id": "phone-a",
    }
    assert (await list_item(b, group))["unread"] == 0  # B recomputes: definitional unread

    assert await pushed_controls(a, READ, settle_s=0.5) == []  # A: 0 times pushed...
    assert await controls(a, READ) == []                       # ...and 0 times in SYNC
    assert await controls(b, READ, group) == [event["control"]]
    assert await pushed_controls(sender, READ, settle_s=0) == []  # other users never hear of it
    entries = read_entries(short_windows, "acme", alice.user_id, group)
    assert [(e["read_conversation_seq"], e["_origin"]) for e in entries] == [(3, "phone-a")]


async def test_c4_ten_marks_within_3_s_write_at_most_one_read_event(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    """The default read_sync_merge_window (3 s): trailing edge, the last position wins."""
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    sender = await bob.connect()
    for i in range(10):
        await send_text(sender, group, f"m{i}")
    a = await alice.connect(device_id="phone-a")
    b = await alice.connect(device_id="tablet-b")
    await drop_pushes(b)

    started = time.monotonic()
    for seq in range(1, 11):
        assert (await mark_read(a, group, seq))["read_conversation_seq"] == seq
        await asyncio.sleep(0.2)
    assert time.monotonic() - started < 3
    assert read_entries(embedded, "acme", alice.user_id, group) == []  # the window is still open

    event = await next_control(b, READ, timeout=6)
    assert event["control"]["read_conversation_seq"] == 10
    await asyncio.sleep(0.5)
    entries = read_entries(embedded, "acme", alice.user_id, group)
    assert len(entries) == 1 and entries[0]["read_conversation_seq"] == 10
    assert await pushed_controls(b, READ) == []  # exactly one EVENT
    assert embedded.db.count("qim_pendingreadsync", "user_id = ?", (user_pk(embedded, "acme", alice.user_id),)) == 0


async def test_the_cursor_never_moves_back_and_stops_at_the_head(
    short_windows: QimDeployment, short_acme: TenantHandle
) -> None:
    alice, bob = short_acme.persona("alice"), short_acme.persona("bob")
    group = create_group(alice, bob)
    sender = await bob.connect()
    for i in range(8):
        await send_text(sender, group, f"m{i}")
    a = await alice.connect(device_id="phone-a")
    b = await alice.connect(device_id="tablet-b")
    await drop_pushes(b)

    assert (await mark_read(a, group, 5))["read_conversation_seq"] == 5
    back = await mark_read(a, group, 3)
    assert (back["read_conversation_seq"], back["unread"]) == (5, 3)
    assert (await mark_read(b, group, 0))["read_conversation_seq"] == 5
    assert (await next_control(b, READ, timeout=5))["control"]["read_conversation_seq"] == 5
    cursor = short_windows.db.query(
        "SELECT read_conversation_seq FROM qim_readcursor WHERE user_id = ? AND conversation_id = ?",
        (user_pk(short_windows, "acme", alice.user_id), group),
    )
    assert cursor == [(5,)]

    beyond = await mark_read(b, group, 1000)  # past the head: clipped to it
    assert (beyond["read_conversation_seq"], beyond["unread"]) == (8, 0)
    assert (await next_control(a, READ, timeout=5))["control"]["read_conversation_seq"] == 8
    assert [e["read_conversation_seq"] for e in read_entries(short_windows, "acme", alice.user_id, group)] == [5, 8]


async def test_reading_lowers_the_stored_badge_to_the_unread_left(
    short_windows: QimDeployment, short_acme: TenantHandle
) -> None:
    alice, bob = short_acme.persona("alice"), short_acme.persona("bob")
    one, two = create_group(alice, bob, title="one"), create_group(alice, bob, title="two")
    sender = await bob.connect()
    for conversation, count in ((one, 2), (two, 3)):
        for i in range(count):
            await send_text(sender, conversation, f"m{i}")
    pk = user_pk(short_windows, "acme", alice.user_id)
    badge = "SELECT badge FROM qim_userbadgestate WHERE user_id = ?"
    assert short_windows.db.query(badge, (pk,)) == [(5,)]
    a = await alice.connect()
    await mark_read(a, one, 2)
    assert short_windows.db.query(badge, (pk,)) == [(3,)]
    assert (await a.request("CONVERSATIONS"))["badge"] == 3


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"read_conversation_seq": "3"}, "bad_frame"),
        ({"read_conversation_seq": -1}, "bad_frame"),
        ({"read_conversation_seq": True}, "bad_frame"),
        ({"read_conversation_seq": 1.5}, "bad_frame"),
        ({"read_conversation_seq": None}, "bad_frame"),
        ({"conversation_id": 5}, "bad_frame"),
        ({"conversation_id": "01HZZZZZZZZZZZZZZZZZZZZZZZ"}, "not_found"),
    ],
)
async def test_bad_marks_are_refused_and_write_nothing(
    short_windows: QimDeployment, short_acme: TenantHandle, fields: dict, code: str
) -> None:
    alice, bob = short_acme.persona("alice"), short_acme.persona("bob")
    group = create_group(alice, bob)
    await send_text(await bob.connect(), group, "unread")
    a = await alice.connect()
    counts = await table_counts(short_windows)
    with pytest.raises(QimError) as refused:
        await a.request("MARK_READ", **{"conversation_id": group, "read_conversation_seq": 1, **fields})
    assert refused.value.code == code
    assert await table_counts(short_windows) == counts


async def test_non_members_and_other_tenants_cannot_mark(short_windows: QimDeployment, short_acme: TenantHandle) -> None:
    alice, bob, eve = (short_acme.persona(n) for n in ("alice", "bob", "eve"))
    group = create_group(alice, bob)
    await send_text(await bob.connect(), group, "unread")
    e = await eve.connect()
    m = await short_windows.tenants["globex"].persona("mallory").connect()
    counts = await table_counts(short_windows)
    try:
        for client, code in ((e, "forbidden"), (m, "not_found")):
            with pytest.raises(QimError) as refused:
                await mark_read(client, group, 1)
            assert refused.value.code == code
        assert await table_counts(short_windows) == counts
    finally:
        await short_windows.tenants["globex"].close_clients()
