"""qimclient's mailbox sync and helpers: catch-up, a saved cursor, reconnect, gap fill, SEND
retries and the REST helpers against a real embedded node; the pump's tolerance of unknown
and malformed events against a scripted session."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from qimclient import (
    Backoff,
    ConnectionLost,
    JsonFileCursorStore,
    MailboxSync,
    QimClient,
    QimError,
    RestClient,
    encode_frame,
)
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import Persona, TenantHandle

FAST_BACKOFF = Backoff(initial=0.05, maximum=0.5, jitter=0.0)
QUIET = 0.3  # seconds of silence that count as "nothing more arrived"


async def sdk_client(persona: Persona, device_id: str = "phone", **options: Any) -> QimClient:
    """A QimClient with sync on (the default) that the tenant fixture closes at the end."""
    options.setdefault("reconnect", False)
    client = QimClient(persona.tenant.node.ws_url, persona.token(device_id), device_id, **options)
    await client.connect()
    persona.tenant.clients.append(client)
    return client


async def raw_sender(persona: Persona) -> QimClient:
    """Sends without syncing: the other end of the conversation."""
    return await persona.connect(sync=False)


def texts(events: list[dict]) -> list[str]:
    return [e["message"]["payload"]["text"] for e in events if e["kind"] == "message" and e["message"]["content_type"] == "text"]


def assert_ordered_once(events: list[dict]) -> None:
    seqs = [e["mailbox_seq"] for e in events]
    assert seqs == sorted(set(seqs)), f"mailbox_seq not strictly ascending: {seqs}"


async def assert_no_more_events(client: QimClient) -> None:
    with pytest.raises(TimeoutError):
        await client.next_event(timeout=QUIET)


async def take_texts(client: QimClient, count: int, timeout: float = 5.0) -> list[dict]:
    """Events until `count` text messages were seen (other events ride along)."""
    events: list[dict] = []
    async with asyncio.timeout(timeout):
        while len(texts(events)) < count:
            events.append(await client.next_event(timeout=None))
    return events


async def test_a_device_offline_during_seven_sends_catches_up_in_order_once(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await raw_sender(alice)
    for i in range(7):
        await send_text(a, group, f"m{i}")
    b = await sdk_client(bob, sync_page_size=3)
    await b.wait_synced(timeout=5)
    events = b.drain_events()
    assert texts(events) == [f"m{i}" for i in range(7)]
    assert_ordered_once(events)
    assert b.cursor == events[-1]["mailbox_seq"]
    assert b.mailbox is not None and b.mailbox.catch_ups >= 1
    await assert_no_more_events(b)


async def test_a_new_client_resumes_from_the_file_cursor_and_gets_only_newer_events(
    acme: TenantHandle, tmp_path: Path
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await raw_sender(alice)
    store = JsonFileCursorStore(tmp_path / "bob-phone.json")
    first = await sdk_client(bob, cursor_store=store)
    for i in range(3):
        await send_text(a, group, f"old{i}")
    assert texts(await take_texts(first, 3)) == ["old0", "old1", "old2"]
    await first.wait_synced(timeout=5)
    saved = first.cursor
    await first.close()
    assert store.load() == saved > 0

    for i in range(2):
        await send_text(a, group, f"new{i}")
    second = await sdk_client(bob, cursor_store=JsonFileCursorStore(tmp_path / "bob-phone.json"))
    assert second.cursor == saved  # loaded before the first SYNC
    await second.wait_synced(timeout=5)
    events = second.drain_events()
    assert texts(events) == ["new0", "new1"]
    assert all(e["mailbox_seq"] > saved for e in events)
    assert store.load() == second.cursor == events[-1]["mailbox_seq"]
    await assert_no_more_events(second)


async def test_after_an_abnormal_drop_the_client_syncs_what_it_missed_without_duplicates(
    acme: TenantHandle,
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await raw_sender(alice)
    # A reconnect delay long enough that the sends below happen while bob is away.
    b = await sdk_client(bob, reconnect=True, backoff=Backoff(initial=1.0, jitter=0.0))
    await send_text(a, group, "before")
    seen = await take_texts(b, 1)

    assert b._ws is not None
    b._ws.transport.abort()  # no close frame: what a dead network looks like to the client
    async with asyncio.timeout(5):
        while b.is_connected:
            await asyncio.sleep(0.01)
    for i in range(3):
        await send_text(a, group, f"missed{i}")
    assert b.reconnects == 0, "the sends were meant to happen while bob was away"

    await b.wait_connected(timeout=10)
    await b.wait_synced(timeout=10)
    seen += b.drain_events()
    await send_text(a, group, "after")
    seen += await take_texts(b, 1)
    assert texts(seen) == ["before", "missed0", "missed1", "missed2", "after"]
    assert_ordered_once(seen)
    assert b.reconnects == 1
    await assert_no_more_events(b)


async def test_a_lost_push_is_recovered_by_a_gap_fill_and_nothing_is_handed_twice(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await raw_sender(alice)
    phone = await sdk_client(bob)
    await phone.wait_synced(timeout=5)
    assert phone.mailbox is not None
    gap_fills = phone.mailbox.gap_fills
    real_dispatch = phone._dispatch
    dropped: list[int] = []

    def lose_one_push(message: str | bytes) -> None:
        frame = json.loads(message)
        if frame.get("type") == "EVENT" and frame["event"]["message"]["payload"] == {"text": "lost"}:
            dropped.append(frame["event"]["mailbox_seq"])
            return
        real_dispatch(message)

    phone._dispatch = lose_one_push  # type: ignore[method-assign]
    await phone.send_text(group, "mine")  # our own message comes back to us, once
    await send_text(a, group, "lost")
    await send_text(a, group, "found")    # its mailbox_seq is past a gap: SYNC fills it
    events = await take_texts(phone, 3)
    await phone.wait_synced(timeout=5)
    events += phone.drain_events()
    assert texts(events) == ["mine", "lost", "found"]
    assert dropped and dropped[0] in [e["mailbox_seq"] for e in events]
    assert_ordered_once(events)
    assert phone.mailbox.gap_fills == gap_fills + 1
    await assert_no_more_events(phone)


async def test_send_text_retries_a_lost_ack_with_the_same_client_msg_id(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    ids = (f"sdk-retry-{n}" for n in itertools.count(1))
    a = await sdk_client(alice, reconnect=True, backoff=FAST_BACKOFF, sync=False, client_msg_ids=lambda: next(ids))
    lost: list[dict] = []
    real_dispatch = a._dispatch

    def lose_the_first_ack(message: str | bytes) -> None:
        # The server committed and answered; the answer dies with the socket.
        frame = json.loads(message)
        if not lost and frame.get("type") == "ACK" and "message_id" in frame:
            lost.append(frame)
            assert a._ws is not None
            a._ws.transport.abort()
            return
        real_dispatch(message)

    a._dispatch = lose_the_first_ack  # type: ignore[method-assign]
    ack = await a.send_text(group, "exactly once")
    assert lost and ack["message_id"] == lost[0]["message_id"]
    assert ack["conversation_seq"] == lost[0]["conversation_seq"] == 1
    assert a.reconnects == 1
    assert embedded.db.count("qim_messagerecord", "conversation_id = ?", (group,)) == 1
    assert embedded.db.count("qim_messagerecord", "client_msg_id = ?", ("sdk-retry-1",)) == 1
    assert [m["payload"] for m in await a.history(group)] == [{"text": "exactly once"}]


async def test_send_without_reconnect_raises_connection_lost(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    group = create_group(alice, acme.persona("bob"))
    a = await sdk_client(alice, sync=False)
    await a.close()
    with pytest.raises(ConnectionLost):
        await a.send_text(group, "nobody listens")


async def test_an_event_of_unknown_kind_in_the_live_stream_does_not_stop_it(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await raw_sender(alice)
    b = await sdk_client(bob)
    await b.wait_synced(timeout=5)
    real_dispatch = b._dispatch
    rewritten: list[int] = []

    def from_the_future(message: str | bytes) -> None:
        # Later protocol versions add kinds, custom_types and fields: dress the first
        # real EVENT up as one, keeping its mailbox_seq so the stream stays contiguous.
        frame = json.loads(message)
        if frame.get("type") == "EVENT" and not rewritten:
            event = frame["event"]
            rewritten.append(event["mailbox_seq"])
            frame["event"] = {
                "mailbox_seq": event["mailbox_seq"], "kind": "hologram", "conversation_id": group,
                "control": {"custom_type": "qim.teleport.v9", "payload": {"x": 1}}, "projected_at": 5,
            }
            message = encode_frame(frame)
        real_dispatch(message)

    b._dispatch = from_the_future  # type: ignore[method-assign]
    b.on_event(lambda event: 1 / 0 if event["kind"] == "hologram" else None)  # a crashing app callback
    await send_text(a, group, "disguised")
    await send_text(a, group, "plain")
    first = await b.next_event(timeout=5)
    assert (first["kind"], first["mailbox_seq"]) == ("hologram", rewritten[0])
    assert texts(await take_texts(b, 1)) == ["plain"]
    await assert_no_more_events(b)


async def test_rest_and_request_helpers(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    async with RestClient(acme.node.http_url, alice.token()) as api:
        group = await api.create_group("helpers", [bob.user_id])
        direct = await api.create_direct(bob.user_id)
        assert await api.create_direct(bob.user_id) == direct != group
        a, b = await sdk_client(alice), await sdk_client(bob)
        c = await sdk_client(carol)
        join_seq = await api.add_members(group, [carol.user_id])
        joined = await c.next_event(timeout=5)
        assert joined["kind"] == "control" and joined["conversation_id"] == group
        assert joined["control"]["custom_type"] == "qim.membership.v1"
        assert joined["control"]["payload"] == {"action": "join", "user_ids": [carol.user_id]}
        assert joined["control"]["conversation_seq"] == join_seq

        ack = await a.send_text(group, "hello helpers")
        await a.send_message(direct, "text", {"text": "psst"})
        assert [(m["conversation_seq"], m["payload"]) for m in await c.history(group, after_seq=join_seq - 1)] == [
            (join_seq, {"action": "join", "user_ids": [carol.user_id]}), (ack["conversation_seq"], {"text": "hello helpers"})]
        assert len(await b.history(group, before_seq=ack["conversation_seq"], limit=1)) == 1
        listing = await b.conversations()
        assert listing["type"] == "CONVERSATION_LIST"
        assert {i["conversation_id"]: i["unread"] for i in listing["items"]} == {group: 1, direct: 1}
        assert listing["badge"] == 2

        await b.typing(group, "start")
        typing = await a.next_push(timeout=5, type="TYPING")
        assert (typing["user_id"], typing["state"]) == (bob.user_id, "start")
        with pytest.raises(ValueError):
            await b.typing(group, "dancing")

    # From another device: an event never reaches the device it originated on (§5).
    async with RestClient(acme.node.http_url, carol.token("web")) as api:
        leave_seq = await api.remove_member(group, carol.user_id)
    assert leave_seq > ack["conversation_seq"]
    events = await take_texts(c, 1) + [await c.next_event(timeout=5)]
    assert texts(events) == ["hello helpers"]
    assert events[-1]["control"]["payload"] == {"action": "leave", "user_ids": [carol.user_id]}
    assert_ordered_once([joined, *events])
    await assert_no_more_events(c)


# The pump alone, against a scripted session: no server can send these yet.


class ScriptedSession:
    """A mailbox held in memory; SYNC pages it like the server. `junk` rides on the first page."""

    def __init__(self, events: list[dict], junk: tuple[Any, ...] = ()) -> None:
        self.events = events
        self.junk = junk
        self.syncs: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()

    @property
    def is_closed(self) -> bool:
        return False

    async def wait_connected(self, timeout: float | None = None) -> None:
        return None

    async def request(self, frame_type: str, /, **fields: Any) -> dict:
        assert frame_type == "SYNC"
        self.syncs.append(fields["after_mailbox_seq"])
        await self.gate.wait()
        after, limit = fields["after_mailbox_seq"], fields.get("limit", 200)
        newer = [e for e in self.events if e["mailbox_seq"] > after]
        page = newer[:limit]
        next_seq = page[-1]["mailbox_seq"] if page else after
        junk = list(self.junk) if after == 0 else []
        return {"type": "SYNC_BATCH", "events": junk + page, "next_mailbox_seq": next_seq, "has_more": len(newer) > limit}


def event(seq: int, kind: str = "message", **extra: Any) -> dict:
    return {"mailbox_seq": seq, "kind": kind, "conversation_id": "c1", **extra}


async def test_unknown_kinds_malformed_events_and_failing_callbacks_never_stop_the_pump() -> None:
    session = ScriptedSession(
        [
            event(2, "control", control={"custom_type": "qim.teleport.v9", "payload": None}, extra_field=True),
            event(1, "hologram", hologram={"depth": 3}),  # out of order in the page: sorted
            event(3, message={"content_type": "com.example.poll", "payload": {"q": "?"}}),
        ],
        junk=("not an event", {"mailbox_seq": "3"}, {"kind": "message"}),
    )
    sync = MailboxSync(session)  # type: ignore[arg-type]
    failures: list[int] = []

    def crash(e: dict) -> None:
        failures.append(e["mailbox_seq"])
        raise RuntimeError("app bug")

    async def crash_async(e: dict) -> None:
        raise KeyError("async app bug")

    sync.on_event(crash)
    sync.on_event(crash_async)
    sync.start()
    try:
        await sync.wait_synced(timeout=2)
        assert [e["mailbox_seq"] for e in sync.drain_events()] == [1, 2, 3]
        assert failures == [1, 2, 3] and sync.invalid_events == 3 and sync.cursor == 3
        for bad in ("garbage", None, {"mailbox_seq": True}, {"mailbox_seq": -1}):
            sync.offer(bad)
        session.events.append(event(4, "quantum"))
        sync.offer(event(4, "quantum", unknown={"nested": [1]}))
        sync.offer(event(4, "quantum"))  # a duplicate push
        sync.offer(event(2))              # an old one
        await sync.wait_synced(timeout=2)
        assert [e["mailbox_seq"] for e in sync.drain_events()] == [4]
        assert sync.invalid_events == 7
    finally:
        await sync.stop()


async def test_concurrent_gaps_coalesce_into_one_catch_up_and_keep_order() -> None:
    session = ScriptedSession([event(n) for n in (1, 3, 5, 6, 9)])  # 2, 4, 7, 8: our own device's
    sync = MailboxSync(session, page_size=2)  # type: ignore[arg-type]
    session.gate.clear()
    sync.start()  # the connect catch-up, held at its first SYNC
    await asyncio.sleep(0)
    for seq in (3, 5, 6):  # pushes racing the catch-up, each past a gap
        sync.offer(event(seq))
    session.gate.set()
    await sync.wait_synced(timeout=2)
    assert [e["mailbox_seq"] for e in sync.drain_events()] == [1, 3, 5, 6, 9]
    assert session.syncs == [0, 3, 6]  # one catch-up, paged; the pushes were covered
    assert sync.gap_fills == 0
    session.events.append(event(11))
    sync.offer(event(11))  # 10 was ours: one SYNC decides, then the push is a duplicate
    await sync.wait_synced(timeout=2)
    assert [e["mailbox_seq"] for e in sync.drain_events()] == [11]
    assert sync.gap_fills == 1 and session.syncs[3:] == [9]
    await sync.stop()


async def test_a_refused_or_unanswered_sync_is_retried_and_a_drop_mid_catch_up_resyncs() -> None:
    session = ScriptedSession([event(n) for n in (1, 2, 3, 4)])
    failures: list[BaseException] = [
        QimError("rate_limited", "slow down", retry_after_ms=20), TimeoutError("no SYNC_BATCH"), ConnectionLost("drop"),
    ]
    scripted_request = session.request

    async def flaky_request(frame_type: str, /, **fields: Any) -> dict:
        if failures:
            session.syncs.append(-1)
            raise failures.pop(0)
        return await scripted_request(frame_type, **fields)

    session.request = flaky_request  # type: ignore[method-assign]
    sync = MailboxSync(session, page_size=2, backoff=FAST_BACKOFF)  # type: ignore[arg-type]
    sync.start()
    try:
        await sync.wait_synced(timeout=5)
        assert [e["mailbox_seq"] for e in sync.drain_events()] == [1, 2, 3, 4]
        assert session.syncs == [-1, -1, -1, 0, 2] and sync.cursor == 4
    finally:
        await sync.stop()


def test_the_file_store_round_trips_and_treats_a_damaged_file_as_no_cursor(tmp_path: Path) -> None:
    store = JsonFileCursorStore(tmp_path / "nested" / "cursor.json")
    assert store.load() is None
    store.save(41)
    store.save(42)
    assert JsonFileCursorStore(store.path).load() == 42
    assert [p.name for p in store.path.parent.iterdir()] == ["cursor.json"]  # no temporaries left
    for damaged in ("{not json", '{"mailbox_seq": "7"}', '[7]', '{"mailbox_seq": -1}'):
        store.path.write_text(damaged)
        assert store.load() is None
