"""Raw sockets and logins for the credentials tests: they watch close codes and ERROR frames,
and log in from chosen loopback addresses (127.0.0.x) to exercise per-address throttles."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import websockets

from tests.harness.personas import PASSWORD, Persona
from tests.harness.qim_process import QimNode

WAIT_S = 60.0  # generous: a loaded 2-core machine


def login(node: QimNode, body: dict[str, Any], address: str = "127.0.0.1") -> httpx.Response:
    """POST auth/token from `address` (any 127.x.y.z reaches the node over loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=30) as http:
        return http.post(f"{node.http_url}/api/v1/auth/token", json=body)


def new_token(persona: Persona, device_id: str, node: QimNode | None = None, address: str = "127.0.0.1") -> str:
    """A fresh token of the persona's device (each login issues a new one)."""
    body = {"tenant": persona.tenant.name, "username": persona.user_id, "password": PASSWORD, "device_id": device_id}
    answer = login(node or persona.tenant.node, body, address)
    assert answer.status_code == 200, answer.text
    return answer.json()["token"]


async def authenticated(node: QimNode, token: str, device_id: str) -> tuple[Any, dict]:
    """A raw socket past AUTH, and its AUTH_OK."""
    ws = await websockets.connect(node.ws_url, open_timeout=WAIT_S)
    await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": device_id}))
    ok = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
    assert ok["type"] == "AUTH_OK", ok
    return ws, ok


async def open_session(node: QimNode, token: str, device_id: str) -> Any:
    """A raw socket past AUTH."""
    return (await authenticated(node, token, device_id))[0]


async def reply(ws: Any, frame: dict[str, Any]) -> dict[str, Any]:
    """Send a request and answer its reply (pushes in between are skipped)."""
    await ws.send(json.dumps(frame))
    async with asyncio.timeout(WAIT_S):
        while True:
            answer = json.loads(await ws.recv())
            if answer.get("req_id") == frame["req_id"]:
                return answer


async def frames_until_closed(ws: Any, timeout: float = WAIT_S) -> tuple[list[dict], int | None]:
    """Every frame the server sends until it closes the socket, and its close code."""
    frames: list[dict] = []
    try:
        async with asyncio.timeout(timeout):
            async for message in ws:
                frames.append(json.loads(message))
    except websockets.ConnectionClosed:
        pass
    return frames, (ws.close_code if ws.close_code is not None else None)


async def still_open(ws: Any) -> bool:
    """True when the socket answers a PING: it was not closed."""
    await ws.send(json.dumps({"type": "PING", "req_id": "still-open"}))
    async with asyncio.timeout(WAIT_S):
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("req_id") == "still-open":
                return frame["type"] == "PONG"


def wait_for(condition, what: str, timeout: float = WAIT_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def revocation_error(frames: list[dict]) -> dict:
    errors = [f for f in frames if f.get("type") == "ERROR"]
    assert len(errors) == 1, frames
    return errors[0]
