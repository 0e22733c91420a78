"""Unauthenticated sockets: 200 idle ones and a crowd sending garbage before AUTH are all
closed (4408 on time, 4401 for garbage) while an authenticated control connection keeps
getting every reply and message."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
import websockets

from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import api_ok

AUTH_TIMEOUT_S = 4.0
IDLE = 200
GARBAGE = [
    "{this is not json", "[1, 2, 3]", json.dumps({"type": "PING"}), json.dumps({"type": "AUTH", "token": 7}),
    json.dumps({"type": "AUTH", "token": "x" * 70_000, "device_id": "phone"}), b"\x00\x01binary",
]


@pytest.fixture(scope="module")
def short_auth(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_AUTH_TIMEOUT_S": str(AUTH_TIMEOUT_S), "QIM_PER_USER_MSG_RATE": "1000"})
    yield deployment
    deployment.stop()


async def close_code(ws, timeout: float = 120) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """The close code the server sent and when; the one frame allowed before it is garbage's
    `ERROR unauthenticated` (anything else is code -2)."""
    try:
        frame = await asyncio.wait_for(ws.recv(), timeout)
    except websockets.ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else -1), time.monotonic()
    if not isinstance(frame, str) or json.loads(frame).get("code") != "unauthenticated":
        return -2, time.monotonic()
    return await close_code(ws, timeout)


async def test_idle_and_garbage_sockets_are_closed_and_do_not_starve_a_control(short_auth: QimDeployment) -> None:
    tenant = short_auth.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    conversation = api_ok(tenant.node, "POST", "conversations", alice.token(),
                          json={"kind": "group", "member_user_ids": [bob.user_id]})["conversation_id"]
    control, receiver = await alice.connect(), await bob.connect()

    idle, opened_at = [], []
    for _ in range(IDLE):
        idle.append(await websockets.connect(tenant.node.ws_url))
        opened_at.append(time.monotonic())
    garbage = []
    for n in range(60):
        ws = await websockets.connect(tenant.node.ws_url, max_size=None)
        await ws.send(GARBAGE[n % len(GARBAGE)])
        garbage.append(ws)
    closing = [asyncio.create_task(close_code(ws)) for ws in idle + garbage]

    # The control connection meanwhile: every request answered, every message delivered.
    sent = []
    for n in range(30):
        assert (await control.request("PING"))["type"] == "PONG"
        sent.append(await control.request("SEND", conversation_id=conversation, client_msg_id=f"c{n}",
                                          content_type="text", payload={"text": f"m{n}"}))
    received = [(await receiver.next_push(timeout=30, type="EVENT"))["event"] for _ in sent]
    assert [e["message"]["conversation_seq"] for e in received] == [a["conversation_seq"] for a in sent]

    closes = await asyncio.gather(*closing)
    assert [code for code, _ in closes[:IDLE]] == [4408] * IDLE
    assert [code for code, _ in closes[IDLE:]] == [4401] * len(garbage)
    # Not one idle socket was closed before its time (however late a loaded machine makes it).
    assert all(at - opened >= AUTH_TIMEOUT_S * 0.99 for (_, at), opened in zip(closes, opened_at))
    assert (await control.request("PING"))["type"] == "PONG"  # still authenticated and served
