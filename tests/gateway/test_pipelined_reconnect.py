"""A reconnecting client may send AUTH, SYNC and ROOM_JOIN at once, without waiting for AUTH_OK
(bench/storm_clients.py does): a socket's frames are handled one after another, AUTH first, so
each is answered in order as if sent after AUTH_OK. When AUTH is refused, the frames behind it
get nothing but that refusal and the close: no SYNC_BATCH, no room, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from tests.conftest import QimDeployment
from tests.core.credential_helpers import WAIT_S, frames_until_closed, new_token, open_session
from tests.harness.personas import api, api_ok


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def deployment(request: pytest.FixtureRequest) -> Iterator[QimDeployment]:
    yield request.getfixturevalue(request.param)


async def pipelined(node: Any, token: str, after_mailbox_seq: int, room_id: str, after_room_seq: int) -> Any:
    """A socket that sent AUTH, SYNC, ROOM_JOIN and PING back to back, before any answer."""
    ws = await websockets.connect(node.ws_url, open_timeout=WAIT_S)
    for frame in ({"type": "AUTH", "req_id": "a", "token": token, "device_id": "phone"},
                  {"type": "SYNC", "req_id": "s", "after_mailbox_seq": after_mailbox_seq},
                  {"type": "ROOM_JOIN", "req_id": "j", "room_id": room_id, "after_room_seq": after_room_seq},
                  {"type": "PING", "req_id": "p"}):
        await ws.send(json.dumps(frame))
    return ws


async def answers(ws: Any, count: int) -> list[dict[str, Any]]:
    """The next `count` replies (frames with a req_id; pushes skipped)."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(WAIT_S):
        while len(out) < count:
            frame = json.loads(await ws.recv())
            if frame.get("req_id") is not None:
                out.append(frame)
    return out


async def test_frames_sent_with_auth_are_answered_after_it_in_order(deployment: QimDeployment) -> None:
    acme = deployment.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    alice_ws = await open_session(acme.node, alice.token(), "phone")
    group = api_ok(acme.node, "POST", "conversations", alice.token(),
                   json={"kind": "group", "member_user_ids": [bob.user_id]})["conversation_id"]
    room = f"pipe-{secrets.token_hex(4)}"
    api_ok(acme.node, "POST", "rooms", alice.token(), json={"room_id": room})
    await alice_ws.send(json.dumps({"type": "ROOM_JOIN", "req_id": "j", "room_id": room}))
    await answers(alice_ws, 1)
    for n in range(3):
        await alice_ws.send(json.dumps({"type": "SEND", "req_id": f"m{n}", "conversation_id": group, "client_msg_id": f"m{n}",
                                        "content_type": "text", "payload": {"text": f"hello {n}"}}))
        await alice_ws.send(json.dumps({"type": "ROOM_SEND", "req_id": f"r{n}", "room_id": room,
                                        "content_type": "text", "payload": {"text": f"room {n}"}}))
    assert {a["type"] for a in await answers(alice_ws, 6)} == {"ACK"}
    ws = await pipelined(acme.node, bob.token(), 1, room, 0)
    auth_ok, page, batch, pong = await answers(ws, 4)
    assert [auth_ok["type"], page["type"], batch["type"], pong["type"]] == ["AUTH_OK", "SYNC_BATCH", "ROOM_BATCH", "PONG"]
    assert auth_ok["user_id"] == bob.user_id
    # The mailbox after position 1: the group's creation is 1, the messages follow.
    assert [e["message"]["payload"]["text"] for e in page["events"] if "message" in e][-2:] == ["hello 1", "hello 2"]
    assert page["has_more"] is False
    assert [e["payload"]["text"] for e in batch["events"]] == ["room 0", "room 1", "room 2"]
    for socket in (ws, alice_ws):
        await socket.close()


async def test_frames_behind_a_refused_auth_get_only_the_refusal(deployment: QimDeployment) -> None:
    acme = deployment.tenants["acme"]
    carol = acme.persona("carol")
    room = f"pipe-{secrets.token_hex(4)}"
    api_ok(acme.node, "POST", "rooms", carol.token(), json={"room_id": room})
    revoked = new_token(carol, "phone")
    assert api(acme.node, "DELETE", "auth/token", revoked).status_code == 204
    for token in (revoked, secrets.token_urlsafe(32)):
        ws = await pipelined(acme.node, token, 0, room, 0)
        frames, code = await frames_until_closed(ws)
        assert code == 4401, frames
        assert [(f["type"], f["code"], f.get("req_id")) for f in frames] == [("ERROR", "unauthenticated", "a")]
