"""What the leaner per-socket state keeps:
autobahn's options read from a per-factory class still bind every socket of the node
(qim/server/lean_protocol.py), the WebSocket route without channels' routers still honours
daphne's --root-path and the origin list (qim/gateway/routing.py), and a socket whose upgrade
request was released keeps serving both ways (qim/server/handshake.py). See
docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from tests.conftest import QimDeployment, TENANT_NAMES
from tests.harness.qim_process import QimNode, sqlite_database

MAX_MESSAGE = 4096


@pytest.fixture(scope="module")
def lean(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One node with a small WebSocket message limit, served under /chat."""
    db = sqlite_database(sqlite_template, work_dir, "lean")
    env = {**db.env, "QIM_VAR_DIR": str(work_dir)}
    args = ("--websocket-max-message-size", str(MAX_MESSAGE), "--root-path", "/chat")
    node = QimNode(node_id="lean", env=env, log_dir=work_dir, daphne_args=args)
    deployment = QimDeployment(db=db, nodes=[node], env=env)
    node.start()
    for name in TENANT_NAMES:
        deployment.bootstrap(name)
    yield deployment
    deployment.stop()


def chat_url(deployment: QimDeployment) -> str:
    return f"ws://127.0.0.1:{deployment.node.port}/chat/ws/v1"


async def recv_json(ws, timeout: float = 30.0) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def authed(deployment: QimDeployment, persona: str, **connect: object):  # type: ignore[no-untyped-def]
    token = deployment.tenants["acme"].persona(persona).token()
    ws = await websockets.connect(chat_url(deployment), max_size=None, **connect)
    await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": "phone"}))
    assert (await recv_json(ws))["type"] == "AUTH_OK"
    return ws


async def test_every_socket_is_bound_by_the_nodes_message_limit(lean: QimDeployment) -> None:
    held = await authed(lean, "alice")
    try:
        for attempt in range(3):
            ws = await authed(lean, "bob")
            await ws.send(json.dumps({"type": "PING", "req_id": f"ok{attempt}", "pad": "y" * 100}))
            assert (await recv_json(ws))["type"] == "PONG"
            await ws.send(json.dumps({"type": "PING", "req_id": "big", "pad": "y" * (2 * MAX_MESSAGE)}))
            # autobahn fails an oversized message by dropping the connection (failByDrop).
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 30)
            assert closed.value.rcvd is None or closed.value.rcvd.code == 1009
        # The socket opened first is still served: the limit closed only the offenders.
        await held.send(json.dumps({"type": "PING", "req_id": "still"}))
        assert (await recv_json(held))["req_id"] == "still"
    finally:
        await held.close()


async def test_the_route_honours_root_path_and_the_origin_list(lean: QimDeployment) -> None:
    ws = await authed(lean, "carol", origin="http://allowed.example")
    await ws.close()
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(chat_url(lean), origin="http://evil.example")
    assert refused.value.response.status_code == 403
    for elsewhere in ("/chat/ws/v2", "/chat/", "/ws/v1"):  # another path; outside the root path
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(f"ws://127.0.0.1:{lean.node.port}{elsewhere}")
        assert refused.value.response.status_code == 403, elsewhere


async def test_a_released_socket_serves_pushes_and_replies_in_order(lean: QimDeployment) -> None:
    """Many frames each way after the upgrade request is gone: every reply arrives, in order,
    also while the client reads nothing for a while (the server's write buffer fills)."""
    ws = await authed(lean, "dave")
    try:
        for i in range(200):
            await ws.send(json.dumps({"type": "PING", "req_id": f"p{i}", "pad": "z" * 3000}))
        await asyncio.sleep(0)
        seen = [(await recv_json(ws))["req_id"] for _ in range(200)]
        assert seen == [f"p{i}" for i in range(200)]
        health = await asyncio.to_thread(lean.node.stats, lean.tenants["acme"].admin_token)
        assert health["connections"] >= 1
    finally:
        await ws.close()
