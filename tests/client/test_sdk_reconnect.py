"""qimclient's reconnect in one round trip, against a real node through a recording proxy: the
ROOM_JOIN of every room and the mailbox's SYNC leave behind AUTH before AUTH_OK, the events
missed in the rooms and the group then arrive once each and in order; a drop right after that
write does it again; a refused AUTH ends the client as a refused reconnect always did."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qimclient import AuthError, Backoff, ConnectionLost, QimClient
from tests.client.test_sdk_rooms import say
from tests.client.test_sdk_sync import take_texts, texts
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.frame_proxy import FrameProxy
from tests.harness.personas import Persona, TenantHandle, api
from tests.rooms.room_helpers import create_room

FAST_BACKOFF = Backoff(initial=0.05, maximum=0.2, jitter=0.0)
QUIET = 0.3
ROOMS = 3
# What a reconnecting client writes before the node's first answer: its whole catch-up.
PIPELINED = ["AUTH", *["ROOM_JOIN"] * ROOMS, "SYNC"]


@pytest.fixture
async def proxy(acme: TenantHandle) -> AsyncIterator[FrameProxy]:
    proxy = FrameProxy(acme.node.ws_url)
    yield proxy
    await proxy.stop()


async def client_through(proxy: FrameProxy, persona: Persona, **options: Any) -> QimClient:
    client = QimClient(await proxy.start(), persona.token(), "phone", backoff=FAST_BACKOFF, **options)
    await client.connect()
    persona.tenant.clients.append(client)
    return client


async def away(proxy: FrameProxy, client: QimClient) -> None:
    """Cut the client's socket and hold new ones until `proxy.open` is set again."""
    proxy.open.clear()
    proxy.cut()
    async with asyncio.timeout(5):
        while client.is_connected:
            await asyncio.sleep(0.01)


async def room_texts(client: QimClient, room: str, count: int) -> list[tuple[int, str]]:
    items = [await client.next_room_event(timeout=10, room_id=room) for _ in range(count)]
    assert all(item["kind"] == "event" for item in items), items
    return [(item["room_seq"], item["event"]["payload"]["text"]) for item in items]


async def assert_nothing_more(client: QimClient) -> None:
    """No room event and no mailbox event beyond those already taken: none handed on twice."""
    with pytest.raises(TimeoutError):
        await client.next_room_event(timeout=QUIET)
    with pytest.raises(TimeoutError):
        await client.next_event(timeout=QUIET)


async def in_rooms_and_group(acme: TenantHandle, proxy: FrameProxy) -> tuple[QimClient, QimClient, list[str], str]:
    """alice (direct) and bob (through the proxy, syncing) in ROOMS rooms and one group, each
    having seen one event everywhere."""
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    rooms = [create_room(alice) for _ in range(ROOMS)]
    a = await alice.connect(sync=False)
    b = await client_through(proxy, bob, reconnect=True)
    for room in rooms:
        await a.join_room(room)
        await b.join_room(room)
        await say(a, room, "seen")
        assert [text for _, text in await room_texts(b, room, 1)] == ["seen"]
    await send_text(a, group, "seen")
    assert texts(await take_texts(b, 1)) == ["seen"]
    await b.wait_synced(timeout=5)
    return a, b, rooms, group


async def test_a_reconnect_pipelines_its_catch_up_and_hands_on_every_missed_event_once(
    acme: TenantHandle, proxy: FrameProxy
) -> None:
    a, b, rooms, group = await in_rooms_and_group(acme, proxy)
    positions = {room: b.room_state(room).last_room_seq for room in rooms}  # type: ignore[union-attr]
    cursor = b.cursor
    await away(proxy, b)
    missed = {room: [(await say(a, room, f"{room[-4:]} missed{i}"))["room_seq"] for i in range(2)] for room in rooms}
    for i in range(3):
        await send_text(a, group, f"group missed{i}")
    proxy.open.set()

    await b.wait_connected(timeout=10)
    for room in rooms:
        assert await room_texts(b, room, 2) == [(seq, f"{room[-4:]} missed{i}") for i, seq in enumerate(missed[room])]
    await b.wait_synced(timeout=10)
    events = b.drain_events()
    assert texts(events) == ["group missed0", "group missed1", "group missed2"]
    assert all(e["mailbox_seq"] > cursor for e in events)
    assert [e["mailbox_seq"] for e in events] == sorted({e["mailbox_seq"] for e in events})
    # The reconnect wrote its whole catch-up before the node's first answer (AUTH_OK).
    first, again = proxy.sockets
    assert first.early == ["AUTH"]
    assert again.early == PIPELINED, again.early
    assert b.pipelined_requests == ROOMS + 1 and b.reconnects == 1
    assert all(b.room_state(room).last_room_seq == missed[room][-1] for room in rooms)  # type: ignore[union-attr]
    assert positions.keys() == set(rooms)
    await assert_nothing_more(b)


async def test_a_drop_right_after_the_pipelined_write_is_caught_up_by_the_next_reconnect(
    acme: TenantHandle, proxy: FrameProxy
) -> None:
    a, b, rooms, group = await in_rooms_and_group(acme, proxy)
    await away(proxy, b)
    missed = [(await say(a, rooms[0], "missed"))["room_seq"]]
    await send_text(a, group, "group missed")
    # The next socket is cut as soon as its whole catch-up is written: its answers are lost.
    proxy.cut_when_early = ROOMS + 2
    proxy.open.set()

    await b.wait_synced(timeout=15)
    assert await room_texts(b, rooms[0], 1) == [(missed[0], "missed")]
    assert texts(b.drain_events()) == ["group missed"]
    assert len(proxy.sockets) == 3 and b.reconnects >= 1
    assert proxy.sockets[2].early == PIPELINED, proxy.sockets[2].early
    await assert_nothing_more(b)


async def test_a_refused_auth_fails_the_pipelined_requests_and_ends_the_client(
    acme: TenantHandle, proxy: FrameProxy
) -> None:
    a, b, rooms, group = await in_rooms_and_group(acme, proxy)
    await away(proxy, b)
    assert api(acme.node, "DELETE", "auth/token", b.token).status_code == 204
    await say(a, rooms[0], "never seen")
    await send_text(a, group, "never seen")
    proxy.open.set()

    with pytest.raises(ConnectionLost):
        await b.wait_connected(timeout=10)
    assert b.is_closed and b.reconnects == 0
    assert isinstance(b.last_error, AuthError) and b.last_error.close_code == 4401
    assert proxy.sockets[1].early == PIPELINED, proxy.sockets[1].early
    # Nothing was applied: the rooms are still tracked, unjoined, and nothing was handed on.
    assert all(not b.room_state(room).joined.is_set() for room in rooms)  # type: ignore[union-attr]
    assert b.drain_room_events() == [] and b.drain_events() == []
    assert b._pending == {}
