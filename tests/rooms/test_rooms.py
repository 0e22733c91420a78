"""Rooms on the embedded default over real sockets: join, send, replay, limits, walls."""

from __future__ import annotations

import asyncio

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import TenantHandle, api, api_ok
from tests.rooms.room_helpers import collect_room_events, counter_of, create_room, epoch_of, join, room_send


async def test_join_send_and_the_batch_reaches_every_member(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = create_room(alice)
    a, b = await alice.connect(), await bob.connect()
    joined = await join(a, room)
    assert joined["type"] == "ROOM_BATCH" and joined["room_id"] == room
    assert joined["events"] == [] and joined["replay_truncated"] is False
    assert joined["room_epoch"] >= 1 and epoch_of(joined["latest_room_seq"]) == joined["room_epoch"]
    await join(b, room)
    ack = await room_send(a, room, "hi room")
    assert ack["type"] == "ACK" and ack["message_id"]
    assert epoch_of(ack["room_seq"]) == joined["room_epoch"] and counter_of(ack["room_seq"]) == 1
    for client in (a, b):
        events = await collect_room_events(client, room, 1)
        assert [(e["room_seq"], e["payload"], e["sender_id"]) for e in events] == [(ack["room_seq"], {"text": "hi room"}, alice.user_id)]
        assert events[0]["content_type"] == "text" and events[0]["sent_at_ms"] > 0
    info = api_ok(acme.node, "GET", f"rooms/{room}", bob.token())
    assert info["online_count"] == 2 and info["latest_room_seq"] == ack["room_seq"]
    assert info["room_epoch"] == joined["room_epoch"] and info["title"] == "lobby"


async def test_replay_inside_the_window_and_join_with_after(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = create_room(alice)
    a = await alice.connect()
    await join(a, room)
    acks = [await room_send(a, room, f"m{i}") for i in range(5)]
    b = await bob.connect()
    replayed = await join(b, room, after=acks[1]["room_seq"])
    assert [e["room_seq"] for e in replayed["events"]] == [ack["room_seq"] for ack in acks[2:]]
    assert replayed["replay_truncated"] is False
    assert replayed["earliest_replay_room_seq"] == acks[0]["room_seq"]
    again = await b.request("ROOM_REPLAY", room_id=room, after_room_seq=acks[3]["room_seq"])
    assert [e["room_seq"] for e in again["events"]] == [acks[4]["room_seq"]]
    from_start = await b.request("ROOM_REPLAY", room_id=room, after_room_seq=0)
    assert len(from_start["events"]) == 5 and from_start["replay_truncated"] is False
    ahead = await b.request("ROOM_REPLAY", room_id=room, after_room_seq=acks[4]["room_seq"] + 10)
    assert (ahead["events"], ahead["replay_truncated"], ahead["replay_truncated_reason"]) == ([], True, "ahead")
    other_epoch = await b.request("ROOM_REPLAY", room_id=room, after_room_seq=acks[0]["room_seq"] - (1 << 48))
    assert (other_epoch["events"], other_epoch["replay_truncated"], other_epoch["replay_truncated_reason"]) == ([], True, "epoch_changed")


async def test_a_retry_with_the_same_client_msg_id_answers_the_original(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    room = create_room(alice)
    a = await alice.connect()
    await join(a, room)
    first = await room_send(a, room, "once", client_msg_id="dup-1")
    again = await room_send(a, room, "once", client_msg_id="dup-1")
    assert again["message_id"] == first["message_id"] and again["room_seq"] == first["room_seq"]
    assert len((await a.request("ROOM_REPLAY", room_id=room, after_room_seq=0))["events"]) == 1


async def test_room_refusals(acme: TenantHandle, globex: TenantHandle) -> None:
    alice = acme.persona("alice")
    room = create_room(alice)
    outsider = await globex.persona("mallory").connect()
    a = await alice.connect()
    cases = [
        (outsider, "ROOM_JOIN", {"room_id": room}, "not_found"),
        (a, "ROOM_JOIN", {"room_id": "no-such-room"}, "not_found"),
        (a, "ROOM_JOIN", {"room_id": "Bad Id!"}, "bad_frame"),
        (a, "ROOM_JOIN", {"room_id": room, "after_room_seq": "x"}, "bad_frame"),
        (a, "ROOM_SEND", {"room_id": room, "content_type": "text", "payload": {"text": "x"}}, "forbidden"),
        (a, "ROOM_REPLAY", {"room_id": room, "after_room_seq": 0}, "forbidden"),
    ]
    for client, frame_type, fields, code in cases:
        with pytest.raises(QimError) as refused:
            await client.request(frame_type, **fields)
        assert refused.value.code == code, (frame_type, fields)
    await join(a, room)
    for fields, code in [
        ({"content_type": "no.such.v1", "payload": {}}, "unknown_custom_type"),
        ({"content_type": "text", "payload": {"text": "x" * 40000}}, "too_large"),
        ({"content_type": "text", "payload": {"text": 3}}, "bad_frame"),
    ]:
        with pytest.raises(QimError) as refused:
            await a.request("ROOM_SEND", room_id=room, **fields)
        assert refused.value.code == code
    assert (await a.request("ROOM_LEAVE", room_id=room))["type"] == "ACK"
    with pytest.raises(QimError):
        await room_send(a, room, "after leaving")
    assert api(acme.node, "GET", f"rooms/{room}", globex.admin_token).status_code == 404
    dup = api(acme.node, "POST", "rooms", alice.token(), json={"room_id": room})
    assert (dup.status_code, dup.json()["code"]) == (409, "conflict")
    bad = api(acme.node, "POST", "rooms", alice.token(), json={"room_id": "UPPER"})
    assert bad.status_code == 400


async def test_max_rooms_per_connection(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    a = await alice.connect()
    rooms = [create_room(alice) for _ in range(21)]
    for room in rooms[:20]:
        await join(a, room)
    with pytest.raises(QimError) as refused:
        await join(a, rooms[20])
    assert refused.value.code == "room_limit"
    await join(a, rooms[0])  # rejoining one it is in is fine


@pytest.fixture(scope="module")
def fast_room_node(sqlite_template, work_dir):  # type: ignore[no-untyped-def]
    """The room rate raised so that 1 000 messages take a second, not fifty."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_ROOM_MSG_RATE": "5000"})
    yield deployment
    deployment.stop()


async def test_room_messages_write_no_mailbox_and_no_push_rows(fast_room_node: QimDeployment) -> None:
    embedded = fast_room_node
    acme = embedded.tenants["acme"]
    alice = acme.persona("alice")
    room = create_room(alice)
    a = await alice.connect()
    await join(a, room)
    mailbox, pushes, records = (embedded.db.count(t) for t in ("qim_usermailboxentry", "qim_pushtask", "qim_messagerecord"))
    sent = 0
    while sent < 1000:
        try:
            await room_send(a, room, f"n{sent}")
            sent += 1
        except QimError as refused:
            assert refused.code == "rate_limited"
            await asyncio.sleep(refused.retry_after_ms / 1000)
    assert (embedded.db.count("qim_usermailboxentry"), embedded.db.count("qim_pushtask"), embedded.db.count("qim_messagerecord")) == (mailbox, pushes, records)
    listing = await a.request("CONVERSATIONS")
    assert all(item["conversation_id"] != room for item in listing["items"])
    assert (await a.request("SYNC", after_mailbox_seq=0))["events"] == []
    await acme.close_clients()


async def test_promotion_makes_a_fresh_group_of_the_online_members(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = create_room(alice)
    a, b = await alice.connect(), await bob.connect()
    await join(a, room)
    await join(b, room)
    await room_send(a, room, "before promotion")
    promoted = api_ok(acme.node, "POST", f"rooms/{room}/promote", acme.admin_token, json={})
    conversation = promoted["conversation_id"]
    history = await b.request("HISTORY", conversation_id=conversation)
    assert history["messages"] == []
    ack = await a.request("SEND", conversation_id=conversation, client_msg_id="p1", content_type="text", payload={"text": "now"})
    assert ack["conversation_seq"] == 1
    listing = await b.request("CONVERSATIONS")
    assert conversation in [i["conversation_id"] for i in listing["items"]]
    explicit = api_ok(acme.node, "POST", f"rooms/{room}/promote", acme.admin_token, json={"member_user_ids": [bob.user_id]})
    assert explicit["conversation_id"] != conversation
    refused = api(acme.node, "POST", f"rooms/{room}/promote", alice.token(), json={})
    assert refused.status_code == 403


@pytest.fixture(scope="module")
def idle_rooms_node(sqlite_template, work_dir):  # type: ignore[no-untyped-def]
    """Writers give idle rooms up after 1 s (leases renewed every 0.2 s, rings kept 1.2 s)."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_ROOM_WRITER_IDLE_S": "1", "QIM_ROOM_LEASE_TTL_S": "0.6", "QIM_ROOM_LOG_RETENTION_MINUTES": "0.02",
    })
    yield deployment
    deployment.stop()


async def test_an_idle_room_gives_its_lease_up_and_a_room_with_a_member_keeps_it(idle_rooms_node: QimDeployment) -> None:
    acme = idle_rooms_node.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    idle, kept = create_room(alice, "idle"), create_room(bob, "kept")
    a, b = await alice.connect(), await bob.connect()
    first = await join(a, idle)
    await room_send(a, idle, "before")
    await a.request("ROOM_LEAVE", room_id=idle)
    await join(b, kept)
    kept_ack = await room_send(b, kept, "stays")

    def retired() -> int:
        return idle_rooms_node.node.stats(acme.admin_token)["counters"].get("room_writers_retired", 0)

    deadline = asyncio.get_running_loop().time() + 60  # polled: ends once it retired
    while retired() < 1 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(2)  # time enough for the kept room to be given up too, were it idle
    assert retired() == 1

    # The idle room works as before under a new writer: the epoch moved on, nothing to replay.
    again = await join(a, idle, after=first["latest_room_seq"] + 1)
    assert again["room_epoch"] == first["room_epoch"] + 1
    assert (again["events"], again["replay_truncated"], again["replay_truncated_reason"]) == ([], True, "epoch_changed")
    assert epoch_of((await room_send(a, idle, "after"))["room_seq"]) == first["room_epoch"] + 1
    # The room with a member kept its writer and its epoch.
    assert epoch_of((await room_send(b, kept, "still"))["room_seq"]) == epoch_of(kept_ack["room_seq"])
