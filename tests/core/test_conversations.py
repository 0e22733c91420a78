"""Conversations over real sockets on the embedded default: SEND, EVENT, SYNC, HISTORY,
intervals, unread, the list, TYPING, and the refusals."""

from __future__ import annotations

import asyncio

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, history_texts, send_text, sync_all
from tests.harness.personas import TenantHandle, api, api_ok


def message_rows(deployment: QimDeployment, conversation_id: str) -> int:
    return deployment.db.count("qim_messagerecord", "conversation_id = ?", (conversation_id,))


async def test_send_reaches_every_member_as_an_event_and_history(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol)
    a, b = await alice.connect(), await bob.connect()
    ack = await send_text(a, group, "hello")
    assert ack["type"] == "ACK" and ack["conversation_seq"] == 1
    assert ack["message_id"] and ack["sent_at_ms"] > 0
    for client in (a, b):
        event = (await client.next_push(timeout=5, type="EVENT"))["event"]
        assert event["kind"] == "message" and event["conversation_id"] == group
        assert event["mailbox_seq"] >= 1
        message = event["message"]
        assert message["conversation_seq"] == 1 and message["payload"] == {"text": "hello"}
        assert message["sender_id"] == alice.user_id and message["sender_device_id"] == "phone"
        assert message["preview"] == "hello" and message["state"] == "normal"
    assert await history_texts(b, group) == [(1, "hello")]


async def test_a_retry_with_the_same_client_msg_id_gets_the_same_ack_and_one_row(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    first = await send_text(a, group, "once", client_msg_id="retry-1")
    again = await send_text(a, group, "once", client_msg_id="retry-1")
    assert {k: again[k] for k in ("message_id", "conversation_seq", "sent_at_ms")} == {
        k: first[k] for k in ("message_id", "conversation_seq", "sent_at_ms")}
    assert message_rows(embedded, group) == 1
    b = await bob.connect()
    events, _ = await sync_all(b)
    assert [e["message"]["message_id"] for e in events if e["conversation_id"] == group] == [first["message_id"]]


async def test_a_client_msg_id_reused_for_another_conversation_is_a_conflict(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    """The key is (user, client_msg_id): reused elsewhere it is not a retry, and must not be
    answered with the first conversation's ACK as if this message had been delivered."""
    alice, bob = acme.persona("alice"), acme.persona("bob")
    first_group, second_group = create_group(alice, bob), create_group(alice, bob, title="other")
    a = await alice.connect()
    await send_text(a, first_group, "here", client_msg_id="reused-1")
    with pytest.raises(QimError) as refused:
        await send_text(a, second_group, "there", client_msg_id="reused-1")
    assert refused.value.code == "conflict"
    assert message_rows(embedded, second_group) == 0
    assert (await send_text(a, second_group, "there"))["conversation_seq"] == 1


async def test_a_send_to_a_conversation_that_does_not_exist_is_not_found(acme: TenantHandle) -> None:
    a = await acme.persona("alice").connect()
    with pytest.raises(QimError) as refused:
        await send_text(a, "01NOSUCHCONVERSATION0000000", "anyone?")
    assert refused.value.code == "not_found"


async def test_interval_rules_for_history_unread_and_the_list(acme: TenantHandle) -> None:
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    group = create_group(alice, bob)
    a, b, c, d = [await p.connect() for p in (alice, bob, carol, dave)]
    await send_text(a, group, "one")                       # seq 1
    join = api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [carol.user_id]})
    assert join["conversation_seq"] == 2                     # carol: joined_at = 1
    await send_text(a, group, "three")                     # seq 3
    leave = api_ok(acme.node, "DELETE", f"conversations/{group}/members/{bob.user_id}", bob.token())
    assert leave["conversation_seq"] == 4                    # bob: left_at = 4
    await send_text(a, group, "five")                      # seq 5

    assert await history_texts(a, group) == [(1, "one"), (2, "qim.membership.v1"), (3, "three"), (4, "qim.membership.v1"), (5, "five")]
    assert await history_texts(c, group) == [(2, "qim.membership.v1"), (3, "three"), (4, "qim.membership.v1"), (5, "five")]
    assert await history_texts(b, group) == [(1, "one"), (2, "qim.membership.v1"), (3, "three")]
    with pytest.raises(QimError) as refused:
        await d.request("HISTORY", conversation_id=group)
    assert refused.value.code == "forbidden"

    lists = {name: await client.request("CONVERSATIONS") for name, client in (("b", b), ("c", c))}
    bob_item = next(i for i in lists["b"]["items"] if i["conversation_id"] == group)
    carol_item = next(i for i in lists["c"]["items"] if i["conversation_id"] == group)
    assert (bob_item["last_seq"], bob_item["unread"], bob_item["preview"]) == (3, 2, "three")
    assert (carol_item["last_seq"], carol_item["unread"], carol_item["preview"]) == (5, 2, "five")

    rejoin = api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [bob.user_id]})
    assert rejoin["conversation_seq"] == 6
    await send_text(a, group, "seven")
    assert await history_texts(b, group) == [
        (1, "one"), (2, "qim.membership.v1"), (3, "three"), (6, "qim.membership.v1"), (7, "seven")]
    bob_item = next(i for i in (await b.request("CONVERSATIONS"))["items"] if i["conversation_id"] == group)
    assert (bob_item["last_seq"], bob_item["unread"]) == (7, 3)  # one, three, seven


async def test_history_paging_is_ascending_and_exclusive(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    group = create_group(alice, acme.persona("bob"))
    a = await alice.connect()
    for i in range(1, 8):
        await send_text(a, group, f"t{i}")
    assert [s for s, _ in await history_texts(a, group, limit=3)] == [5, 6, 7]
    assert [s for s, _ in await history_texts(a, group, before_seq=5, limit=3)] == [2, 3, 4]
    assert [s for s, _ in await history_texts(a, group, after_seq=2, limit=2)] == [3, 4]
    assert [s for s, _ in await history_texts(a, group, after_seq=2, before_seq=5)] == [3, 4]


async def test_the_list_orders_by_activity_and_counts_unread(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    older = create_group(alice, bob, title="older")
    newer = create_group(alice, bob, title="newer")
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, newer, "n1")
    await send_text(a, older, "o1")
    await send_text(a, older, "o2")
    listing = await b.request("CONVERSATIONS")
    ids = [i["conversation_id"] for i in listing["items"]]
    assert ids.index(older) < ids.index(newer)
    by_id = {i["conversation_id"]: i for i in listing["items"]}
    assert by_id[older]["unread"] == 2 and by_id[newer]["unread"] == 1
    assert by_id[older]["kind"] == "group" and by_id[older]["title"] == "older"
    assert listing["badge"] == 3
    assert next(i for i in (await a.request("CONVERSATIONS"))["items"] if i["conversation_id"] == older)["unread"] == 0


async def test_offline_member_catches_up_by_sync_with_nothing_lost_or_doubled(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    sent = [await send_text(a, group, f"m{i}") for i in range(12)]
    b = await bob.connect()
    events, cursor = await sync_all(b, limit=5)
    got = [e["message"]["message_id"] for e in events]
    assert got == [ack["message_id"] for ack in sent]
    assert [e["mailbox_seq"] for e in events] == sorted({e["mailbox_seq"] for e in events})
    again, same_cursor = await sync_all(b, after=cursor)
    assert again == [] and same_cursor == cursor


async def test_direct_conversations_are_unique_per_pair(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    first = api(acme.node, "POST", "conversations", alice.token(), json={"kind": "direct", "member_user_ids": [bob.user_id]})
    second = api(acme.node, "POST", "conversations", bob.token(), json={"kind": "direct", "member_user_ids": [alice.user_id, bob.user_id]})
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["conversation_id"] == second.json()["conversation_id"]
    three = api(acme.node, "POST", "conversations", alice.token(), json={"kind": "direct", "member_user_ids": [bob.user_id, acme.persona("carol").user_id]})
    assert three.status_code == 400 and three.json()["code"] == "bad_request"
    members = api(acme.node, "POST", f"conversations/{first.json()['conversation_id']}/members", alice.token(), json={"user_ids": ["x"]})
    assert members.status_code == 403


async def test_typing_reaches_other_online_members_only(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob)
    a, b, c = await alice.connect(), await bob.connect(), await carol.connect()
    await a.send_frame({"type": "TYPING", "conversation_id": group, "state": "start"})
    typing = await b.next_push(timeout=5, type="TYPING")
    assert typing == {"type": "TYPING", "conversation_id": group, "user_id": alice.user_id, "state": "start"}
    await asyncio.sleep(0.3)
    assert [f for f in a.drain_pushes() if f["type"] == "TYPING"] == []
    assert c.drain_pushes() == []
    with pytest.raises(QimError) as refused:
        await c.request("TYPING", conversation_id=group, state="start")
    assert refused.value.code == "forbidden"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"content_type": "text", "payload": {"text": "x" * 40_000}}, "too_large"),
        ({"content_type": "text", "payload": {"text": 5}}, "bad_frame"),
        ({"content_type": "text", "payload": "just a string"}, "bad_frame"),
        ({"content_type": "no.such.type", "payload": {}}, "unknown_custom_type"),
        ({"content_type": "qim.membership.v1", "payload": {}}, "unknown_custom_type"),
        ({"content_type": 7, "payload": {}}, "bad_frame"),
        ({"content_type": "text", "payload": {"text": "x"}, "client_msg_id": 12}, "bad_frame"),
        ({"content_type": "text", "payload": {"text": "x"}, "client_msg_id": ""}, "bad_frame"),
        ({"content_type": "text", "payload": {"text": "x"}, "conversation_id": ["a"]}, "bad_frame"),
    ],
)
async def test_refused_sends_write_nothing(
    embedded: QimDeployment, acme: TenantHandle, fields: dict, code: str
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    frame = {"conversation_id": group, "client_msg_id": "bad-1", **fields}
    with pytest.raises(QimError) as refused:
        await a.request("SEND", **frame)
    assert refused.value.code == code
    assert message_rows(embedded, group) == 0
    assert (await send_text(a, group, "fine"))["conversation_seq"] == 1  # no seq was taken


async def test_non_members_and_other_tenants_are_refused(
    embedded: QimDeployment, acme: TenantHandle, globex: TenantHandle
) -> None:
    alice, bob, eve = (acme.persona(n) for n in ("alice", "bob", "eve"))
    group = create_group(alice, bob)
    outsider = globex.persona("mallory")
    e, m = await eve.connect(), await outsider.connect()
    for client, code in ((e, "forbidden"), (m, "not_found")):
        with pytest.raises(QimError) as refused:
            await send_text(client, group, "let me in")
        assert refused.value.code == code
    with pytest.raises(QimError) as refused:
        await m.request("HISTORY", conversation_id=group)
    assert refused.value.code == "not_found"
    assert message_rows(embedded, group) == 0
    # REST walls: another tenant's conversation is not found, never forbidden.
    for method, path in (("POST", f"conversations/{group}/members"), ("DELETE", f"conversations/{group}/members/{bob.user_id}")):
        answer = api(acme.node, method, path, outsider.token(), json={"user_ids": [outsider.user_id]})
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found")
    not_in = api(acme.node, "POST", f"conversations/{group}/members", eve.token(), json={"user_ids": [eve.user_id]})
    assert (not_in.status_code, not_in.json()["code"]) == (403, "forbidden")
    kick = api(acme.node, "DELETE", f"conversations/{group}/members/{alice.user_id}", bob.token())
    assert (kick.status_code, kick.json()["code"]) == (403, "forbidden")
    cross = api(acme.node, "POST", "conversations", alice.token(), json={"kind": "group", "member_user_ids": [outsider.user_id]})
    assert (cross.status_code, cross.json()["code"]) == (404, "not_found")


async def test_admin_removes_and_the_removed_user_is_told(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    b = await bob.connect()
    removed = api_ok(acme.node, "DELETE", f"conversations/{group}/members/{bob.user_id}", acme.admin_token)
    event = (await b.next_push(timeout=5, type="EVENT"))["event"]
    assert event["kind"] == "control"
    assert event["control"]["custom_type"] == "qim.membership.v1"
    assert event["control"]["payload"] == {"action": "remove", "user_ids": [bob.user_id]}
    assert event["control"]["conversation_seq"] == removed["conversation_seq"]
    with pytest.raises(QimError) as refused:
        await send_text(b, group, "still here?")
    assert refused.value.code == "forbidden"


async def test_a_membership_change_skips_the_device_that_made_it(acme: TenantHandle) -> None:
    """protocol.md §5: an event whose origin_device_id is the receiving device is never
    delivered to it. A REST call acts as its token's device; that device has its answer."""
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob)
    phone, tablet = await alice.connect(device_id="phone"), await alice.connect(device_id="tablet")
    b, c = await bob.connect(), await carol.connect()
    joined = api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token("phone"),
                    json={"user_ids": [carol.user_id]})
    for client in (tablet, b, c):
        control = (await client.next_push(timeout=5, type="EVENT"))["event"]["control"]
        assert (control["custom_type"], control["conversation_seq"]) == ("qim.membership.v1", joined["conversation_seq"])
        assert (control["actor_id"], control["origin_device_id"]) == (alice.user_id, "phone")
    left = api_ok(acme.node, "DELETE", f"conversations/{group}/members/{carol.user_id}", carol.token("phone"))
    assert (await tablet.next_push(timeout=5, type="EVENT"))["event"]["control"]["payload"] == {
        "action": "leave", "user_ids": [carol.user_id]}

    def memberships(events: list[dict]) -> list[int]:
        return [e["control"]["conversation_seq"] for e in events
                if e["kind"] == "control" and e["control"]["custom_type"] == "qim.membership.v1"]

    await asyncio.sleep(0.3)
    assert memberships([f["event"] for f in phone.drain_pushes() if f["type"] == "EVENT"]) == [left["conversation_seq"]]
    assert memberships((await sync_all(phone))[0]) == [left["conversation_seq"]]
    assert memberships((await sync_all(tablet))[0]) == [joined["conversation_seq"], left["conversation_seq"]]
    assert memberships([f["event"] for f in c.drain_pushes() if f["type"] == "EVENT"]) == []  # carol left from "phone"
    assert memberships((await sync_all(c))[0]) == [joined["conversation_seq"]]


async def test_per_user_message_rate_is_enforced(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    group = create_group(alice, acme.persona("bob"))
    a = await alice.connect()
    results = await asyncio.gather(*(send_text(a, group, f"burst {i}") for i in range(30)), return_exceptions=True)
    limited = [r for r in results if isinstance(r, QimError)]
    assert limited and all(r.code == "rate_limited" for r in limited)
    assert all(r.retry_after_ms is not None and r.retry_after_ms >= 0 for r in limited)
    accepted = [r for r in results if isinstance(r, dict)]
    assert len(accepted) <= 20
    assert sorted(r["conversation_seq"] for r in accepted) == list(range(1, len(accepted) + 1))


async def test_past_the_rate_a_retry_still_gets_its_first_ack_and_a_non_member_forbidden(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob, eve = (acme.persona(n) for n in ("alice", "bob", "eve"))
    group = create_group(alice, bob)
    a = await alice.connect()
    first = await send_text(a, group, "once", client_msg_id="kept-1")
    burst = await asyncio.gather(*(send_text(a, group, f"burst {i}") for i in range(25)), return_exceptions=True)
    assert any(isinstance(r, QimError) and r.code == "rate_limited" for r in burst)
    again = await send_text(a, group, "once", client_msg_id="kept-1")  # the budget is spent
    assert (again["message_id"], again["conversation_seq"]) == (first["message_id"], first["conversation_seq"])

    e = await eve.connect()
    outcomes = await asyncio.gather(*(send_text(e, group, f"in? {i}") for i in range(25)), return_exceptions=True)
    assert {r.code for r in outcomes} == {"forbidden"}  # never rate_limited: that would invite a retry
    accepted = [r for r in burst if isinstance(r, dict)]
    assert message_rows(embedded, group) == 1 + len(accepted)
