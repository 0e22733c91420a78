"""The replies to frames that arrive in one read are written with one `send()` once the last is
served (qim/server/wire.py `hold`/`release`, qim/gateway/consumer.py `_dispatch_held`), on a
real daphne node over a raw socket, so that what one write of the client carries and what one
read of the client gets are both known: every reply comes, in order, in one read; errors
among the frames keep their places; a refused AUTH's ERROR still precedes the close 4401,
which autobahn writes after releasing what was held."""

from __future__ import annotations

import json
import secrets
import struct
from collections.abc import AsyncIterator

import pytest

from tests.conftest import QimDeployment
from tests.harness.batches import counter
from tests.harness.personas import TenantHandle, api_ok
from tests.harness.raw_socket import OPCODE_CLOSE, OPCODE_TEXT, RawSocket, frames_in, texts


@pytest.fixture
async def raw(embedded: QimDeployment) -> AsyncIterator[RawSocket]:
    sock = await RawSocket.open(embedded.nodes[0].port)
    yield sock
    sock.sock.close()


def held_count(tenant: TenantHandle) -> int:
    return counter(tenant.node, tenant, "frames_written_held")


@pytest.mark.tuned
async def test_a_pipelined_reconnect_gets_every_reply_in_order_in_one_read(embedded: QimDeployment, raw: RawSocket) -> None:
    acme = embedded.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = f"held-{secrets.token_hex(4)}"
    api_ok(acme.node, "POST", "rooms", alice.token(), json={"room_id": room})
    held = held_count(acme)
    await raw.send_frames({"type": "AUTH", "req_id": "a", "token": bob.token(), "device_id": "phone"},
                          {"type": "SYNC", "req_id": "s", "after_mailbox_seq": 0},
                          {"type": "ROOM_JOIN", "req_id": "j", "room_id": room, "after_room_seq": 0},
                          {"type": "PING", "req_id": "p"})
    replies = texts(frames_in(await raw.read_once()))
    assert [(r["type"], r["req_id"]) for r in replies] == [
        ("AUTH_OK", "a"), ("SYNC_BATCH", "s"), ("ROOM_BATCH", "j"), ("PONG", "p")], replies
    assert replies[0]["user_id"] == bob.user_id
    assert replies[1]["has_more"] is False and replies[2]["events"] == [], replies  # contents: test_pipelined_reconnect
    assert held_count(acme) - held == 4
    # A frame read alone afterwards is written at once, not held.
    await raw.send_frames({"type": "PING", "req_id": "q"})
    assert [(r["type"], r["req_id"]) for r in texts(frames_in(await raw.read_once()))] == [("PONG", "q")]
    assert held_count(acme) - held == 4


@pytest.mark.tuned
async def test_errors_among_frames_read_at_once_keep_their_places(embedded: QimDeployment, raw: RawSocket) -> None:
    acme = embedded.tenants["acme"]
    carol = acme.persona("carol")
    await raw.send_frames({"type": "AUTH", "req_id": "a", "token": carol.token(), "device_id": "phone"},
                          b"not json", {"type": "NO_SUCH_TYPE", "req_id": "u"},
                          {"type": "ROOM_JOIN", "req_id": "j", "room_id": "no-such-room"},
                          {"type": "PING", "req_id": "p"})
    replies = texts(frames_in(await raw.read_once()))
    assert [(r["type"], r.get("code"), r.get("req_id")) for r in replies] == [
        ("AUTH_OK", None, "a"), ("ERROR", "bad_frame", None), ("ERROR", "unknown_type", "u"),
        ("ERROR", "not_found", "j"), ("PONG", None, "p")], replies


async def test_a_refused_auth_read_with_frames_behind_it_gets_its_error_then_the_close(raw: RawSocket) -> None:
    await raw.send_frames({"type": "AUTH", "req_id": "a", "token": secrets.token_urlsafe(32), "device_id": "phone"},
                          {"type": "SYNC", "req_id": "s", "after_mailbox_seq": 0},
                          {"type": "PING", "req_id": "p"})
    frames = await raw.read_through_close()
    assert [opcode for opcode, _ in frames] == [OPCODE_TEXT, OPCODE_CLOSE], frames
    error = json.loads(frames[0][1])
    assert (error["type"], error["code"], error["req_id"]) == ("ERROR", "unauthenticated", "a")
    assert struct.unpack("!H", frames[1][1][:2])[0] == 4401
