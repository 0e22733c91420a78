"""A node whose loop stalls past its room lease (a reconnect storm on a busy machine; here a
SIGSTOP) keeps its rooms when nobody took them meanwhile: on the embedded default the lease is
in-process, so nobody can, and the room goes on at the same epoch (rooms/service.py
`_renewed`), its members replaying what they missed instead of refetching a new epoch."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.core.credential_helpers import open_session, reply
from tests.rooms.room_helpers import create_room, epoch_of

LEASE_TTL_S = 1.0


@pytest.fixture(scope="module")
def short_leases(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_ROOM_LEASE_TTL_S": str(LEASE_TTL_S)})
    yield deployment
    deployment.stop()


async def room_send(ws: Any, room: str, text: str) -> int:
    ack = await reply(ws, {"type": "ROOM_SEND", "req_id": text, "room_id": room, "content_type": "text",
                           "payload": {"text": text}})
    assert ack["type"] == "ACK", ack
    return int(ack["room_seq"])


async def test_a_stalled_node_keeps_its_room_and_epoch(short_leases: QimDeployment) -> None:
    acme = short_leases.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = create_room(alice)
    alice_ws = await open_session(acme.node, alice.token(), "phone")
    bob_ws = await open_session(acme.node, bob.token(), "phone")
    for ws in (alice_ws, bob_ws):
        assert (await reply(ws, {"type": "ROOM_JOIN", "req_id": "j", "room_id": room}))["type"] == "ROOM_BATCH"
    seen = [await room_send(alice_ws, room, f"before {i}") for i in range(2)]
    await bob_ws.close()  # bob is away while the node stalls and alice writes on
    assert acme.node.process is not None
    os.kill(acme.node.process.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        while time.monotonic() - stopped < LEASE_TTL_S * 3:  # past the lease by the node's own clock
            await asyncio.sleep(0.1)
    finally:
        os.kill(acme.node.process.pid, signal.SIGCONT)
    missed = [await room_send(alice_ws, room, f"after {i}") for i in range(3)]
    assert {epoch_of(seq) for seq in seen + missed} == {epoch_of(seen[0])}
    bob_ws = await open_session(acme.node, bob.token(), "phone")
    batch = await reply(bob_ws, {"type": "ROOM_JOIN", "req_id": "j", "room_id": room, "after_room_seq": seen[-1]})
    assert batch["replay_truncated"] is False, batch
    assert [e["room_seq"] for e in batch["events"]] == missed
    assert [e["payload"]["text"] for e in batch["events"]] == ["after 0", "after 1", "after 2"]
    counters = acme.node.stats(acme.admin_token)["counters"]
    assert counters.get("room_epoch_bumps") == 1, counters
    for ws in (alice_ws, bob_ws):
        await ws.close()
