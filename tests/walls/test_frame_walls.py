"""Tenant walls on every WebSocket frame: an id of another tenant answers exactly like an id
that never existed (type, code, message; only req_id and the id itself normalised).

The cases are keyed by frame type and checked against the dispatch table, so a new frame type
without a wall case fails here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from qim.gateway.dispatch import load_frame_modules, registered_types
from qimclient import QimClient
from tests.harness.personas import Persona, TenantHandle, api_ok

_serial = itertools.count(1)
# Frames whose fields name nothing of a tenant: nothing to wall (SYNC's cursor is the caller's
# own mailbox; PING and REGISTRY_GET take no id).
NO_ID_FRAMES = {"PING", "SYNC", "REGISTRY_GET"}


@dataclass
class World:
    """acme's caller (with a conversation of its own, shared with bob) and globex's things."""

    alice: Persona
    bob: Persona
    acme_conversation: str
    globex_user: Persona
    globex_peer: Persona
    globex_conversation: str
    globex_room: str
    globex_custom_type: str


@pytest.fixture
async def world(acme: TenantHandle, globex: TenantHandle) -> World:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    acme_conversation = api_ok(acme.node, "POST", "conversations", alice.token(),
                               json={"kind": "group", "member_user_ids": [bob.user_id]})["conversation_id"]
    g_user, g_peer = globex.persona("gina"), globex.persona("gus")
    globex_conversation = api_ok(globex.node, "POST", "conversations", g_user.token(),
                                 json={"kind": "group", "member_user_ids": [g_peer.user_id]})["conversation_id"]
    room = f"groom-{next(_serial)}"
    api_ok(globex.node, "POST", "rooms", g_user.token(), json={"room_id": room})
    custom = f"globex.card{next(_serial)}.v1"
    api_ok(globex.node, "POST", "registry/types", globex.admin_token,
           json={"custom_type": custom, "delivery_class": "persistent"})
    g = await g_user.connect()
    await g.request("SEND", conversation_id=globex_conversation, client_msg_id="g1",
                    content_type="text", payload={"text": "globex secret"})
    return World(alice, bob, acme_conversation, g_user, g_peer, globex_conversation, room, custom)


def missing_id() -> str:
    return f"never-{next(_serial)}"


# Each case: frame type -> builders of (the frame for an id, the foreign id) pairs.
Case = tuple[Callable[[str], dict[str, Any]], Callable[[World], str]]


def conversation_frame(frame_type: str, **fields: Any) -> Case:
    return (lambda cid: {"type": frame_type, "conversation_id": cid, **fields}, lambda w: w.globex_conversation)


def room_frame(frame_type: str, **fields: Any) -> Case:
    return (lambda rid: {"type": frame_type, "room_id": rid, **fields}, lambda w: w.globex_room)


def rtc_target(w: World) -> Case:
    """The caller's own conversation, another tenant's user as the callee."""
    return (lambda uid: {"type": "RTC_SIGNAL", "conversation_id": w.acme_conversation, "target_user_id": uid,
                         "call_id": f"call-{next(_serial)}", "action": "invite"}, lambda w: w.globex_user.user_id)


CASES: dict[str, list[Case] | Callable[[World], list[Case]]] = {
    "SEND": [
        conversation_frame("SEND", client_msg_id="c1", content_type="text", payload={"text": "hi"}),
    ],
    "HISTORY": [conversation_frame("HISTORY")],
    "CONVERSATIONS": [
        (lambda cid: {"type": "CONVERSATIONS", "before": {"last_activity_ms": 2**53, "conversation_id": cid}},
         lambda w: w.globex_conversation),
    ],
    "TYPING": [conversation_frame("TYPING", state="start")],
    "MARK_READ": [conversation_frame("MARK_READ", read_conversation_seq=1)],
    "RECALL": [conversation_frame("RECALL", conversation_seq=1)],
    "EDIT": [conversation_frame("EDIT", conversation_seq=1, payload={"text": "x"})],
    "REACT": [conversation_frame("REACT", conversation_seq=1, reaction_key="+1", action="add")],
    "PRESENCE_SUB": [(lambda uid: {"type": "PRESENCE_SUB", "user_ids": [uid]}, lambda w: w.globex_user.user_id)],
    "PRESENCE_UNSUB": [(lambda uid: {"type": "PRESENCE_UNSUB", "user_ids": [uid]}, lambda w: w.globex_user.user_id)],
    "ROOM_JOIN": [room_frame("ROOM_JOIN"), room_frame("ROOM_JOIN", after_room_seq=0)],
    "ROOM_LEAVE": [room_frame("ROOM_LEAVE")],
    "ROOM_SEND": [room_frame("ROOM_SEND", content_type="text", payload={"text": "hi"})],
    "ROOM_REPLAY": [room_frame("ROOM_REPLAY", after_room_seq=0)],
    "RTC_SIGNAL": lambda w: [
        conversation_frame("RTC_SIGNAL", target_user_id=w.globex_peer.user_id, call_id=f"c-{next(_serial)}",
                           action="invite"),
        rtc_target(w),
        (lambda call: {"type": "RTC_SIGNAL", "conversation_id": w.acme_conversation,
                       "target_user_id": w.bob.user_id, "call_id": call, "action": "hangup"},
         lambda w: "globex-call-1"),
    ],
}


def test_every_frame_type_has_a_wall_case() -> None:
    load_frame_modules()
    assert set(CASES) | NO_ID_FRAMES == set(registered_types())


async def answer(client: QimClient, frame: dict[str, Any], the_id: str) -> str:
    """The reply with req_id dropped and the id replaced, as comparable JSON text."""
    frame = {**frame, "req_id": f"w{next(_serial)}"}
    reply = await raw_request(client, frame)
    reply.pop("req_id", None)
    return json.dumps(reply, sort_keys=True).replace(the_id, "<ID>")


async def raw_request(client: QimClient, frame: dict[str, Any]) -> dict[str, Any]:
    from qimclient.errors import QimError

    try:
        return dict(await client.request_frame(frame))
    except QimError as refused:
        return dict(refused.frame)


async def test_another_tenants_id_answers_like_a_missing_one(world: World) -> None:
    alice = await world.alice.connect()
    checked = 0
    for frame_type, cases in CASES.items():
        for build, foreign_of in (cases(world) if callable(cases) else cases):
            foreign, missing = foreign_of(world), missing_id()
            if frame_type == "RTC_SIGNAL" and foreign == "globex-call-1":
                await start_globex_call(world, foreign)
            got_foreign = await answer(alice, build(foreign), foreign)
            got_missing = await answer(alice, build(missing), missing)
            assert got_foreign == got_missing, f"{frame_type}: {got_foreign} != {got_missing}"
            checked += 1
    assert checked >= len(CASES)
    # Nothing of globex reached acme's socket meanwhile.
    await asyncio.sleep(0)
    assert all("globex secret" not in json.dumps(p) for p in alice.drain_pushes())


async def start_globex_call(world: World, call_id: str) -> None:
    g = await world.globex_user.connect(device_id="caller")
    await g.request("RTC_SIGNAL", conversation_id=world.globex_conversation,
                    target_user_id=world.globex_peer.user_id, call_id=call_id, action="invite")


async def test_a_custom_type_of_another_tenant_is_unknown_here(world: World) -> None:
    alice = await world.alice.connect()
    frame = {"type": "SEND", "conversation_id": world.acme_conversation, "client_msg_id": "t1", "payload": {}}
    foreign, missing = world.globex_custom_type, f"acme.never{next(_serial)}.v1"
    got_foreign = await answer(alice, {**frame, "content_type": foreign}, foreign)
    got_missing = await answer(alice, {**frame, "content_type": missing}, missing)
    assert got_foreign == got_missing
    assert json.loads(got_foreign)["code"] == "unknown_custom_type"
    registry = await alice.request("REGISTRY_GET")
    assert world.globex_custom_type not in {t["custom_type"] for t in registry["types"]}


async def test_presence_of_another_tenants_online_user_reads_like_nobody(world: World) -> None:
    await world.globex_user.connect(device_id="tablet")  # online in globex
    alice = await world.alice.connect()
    ack = await alice.request("PRESENCE_SUB", user_ids=[world.globex_user.user_id])
    assert ack["presence"] == {world.globex_user.user_id: False}
    # Going offline and online again in globex pushes nothing to acme.
    again = await world.globex_user.connect(device_id="watch")
    await again.close()
    await alice.request("PING")
    assert [p for p in alice.drain_pushes() if p.get("type") == "PRESENCE"] == []


async def test_the_same_room_id_in_two_tenants_is_two_rooms(acme: TenantHandle, globex: TenantHandle) -> None:
    room = f"lobby-{next(_serial)}"
    a_user, g_user = acme.persona("ann"), globex.persona("gil")
    api_ok(acme.node, "POST", "rooms", a_user.token(), json={"room_id": room})
    api_ok(globex.node, "POST", "rooms", g_user.token(), json={"room_id": room})
    a, g = await a_user.connect(), await g_user.connect()
    await a.request("ROOM_JOIN", room_id=room)
    await g.request("ROOM_JOIN", room_id=room)
    sent = await g.request("ROOM_SEND", room_id=room, content_type="text", payload={"text": "globex only"})
    mine = await a.request("ROOM_SEND", room_id=room, content_type="text", payload={"text": "acme only"})
    # Each room numbers its own events from 1: two rooms, not one.
    assert sent["room_seq"] & 0xFFFFFFFFFFFF == 1 and mine["room_seq"] & 0xFFFFFFFFFFFF == 1
    replay = await a.request("ROOM_REPLAY", room_id=room, after_room_seq=0)
    assert [e["payload"]["text"] for e in replay["events"]] == ["acme only"]
    await a.request("PING")
    assert "globex only" not in json.dumps(a.drain_pushes())
    info = api_ok(acme.node, "GET", f"rooms/{room}", a_user.token())
    assert info["online_count"] == 1


async def test_a_registry_change_is_announced_in_its_tenant_only(acme: TenantHandle, globex: TenantHandle) -> None:
    a, g = await acme.persona("ann").connect(), await globex.persona("gil").connect()
    api_ok(globex.node, "POST", "registry/types", globex.admin_token,
           json={"custom_type": f"globex.note{next(_serial)}.v1", "delivery_class": "persistent"})
    updated = await g.next_push(timeout=30, type="REGISTRY_UPDATED")
    assert updated["registry_version"] == (await g.request("REGISTRY_GET"))["registry_version"]
    await a.request("PING")  # anything pushed to acme's socket by the same change is in by now
    assert [p for p in a.drain_pushes() if p.get("type") == "REGISTRY_UPDATED"] == []
