"""The idle QIM member of bench/connections.py: AUTH, ROOM_JOIN of its room, PRESENCE_SUB of
five users, then nothing; and the rooms they join, created before over REST."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from loadgen import Target

ROOM_MEMBERS = 100
WATCHED_PER_CONNECTION = 5


def room_of(index: int) -> str:
    return f"idle-{index // ROOM_MEMBERS}"


def plan(user_ids: list[str]) -> list[tuple[str, str, list[str]]]:
    """(user id, room id, the five user ids it watches) for each connection, in order."""
    n = len(user_ids)
    return [(user_ids[i], room_of(i), [user_ids[(i + k) % n] for k in range(1, WATCHED_PER_CONNECTION + 1)])
            for i in range(n)]


def create_rooms(http_url: str, admin_token: str, count: int) -> None:
    with httpx.Client(base_url=http_url, headers={"Authorization": f"Token {admin_token}"}, timeout=30) as client:
        for index in range(0, count * ROOM_MEMBERS, ROOM_MEMBERS):
            answer = client.post("/api/v1/rooms", json={"room_id": room_of(index), "title": "idle"})
            if answer.status_code not in (201, 409):
                raise RuntimeError(f"creating room {room_of(index)} failed: {answer.status_code} {answer.text}")


async def _answer(ws: Any, req_id: str, timeout: float) -> dict[str, Any]:
    """The reply to `req_id`, skipping pushes (PRESENCE of users coming online meanwhile)."""
    while True:
        frame = json.loads(await ws.recv(timeout))
        if frame.get("req_id") == req_id:
            return frame


async def open_idle_member(target: Target, spec: tuple[str, str, list[str]], token: str, timeout: float = 120.0) -> Any:
    """AUTH, ROOM_JOIN, PRESENCE_SUB; the socket then drops whatever it is sent."""
    from lean_ws import connect

    _, room_id, watched = spec
    host, port, path = target.host_port_path
    ws = await connect(host, port, path, timeout)
    ws.send_text(json.dumps({"type": "AUTH", "req_id": "a", "token": token, "device_id": "populated"}))
    if (ok := await _answer(ws, "a", timeout)).get("type") != "AUTH_OK":
        raise RuntimeError(f"AUTH refused: {ok}")
    ws.send_text(json.dumps({"type": "ROOM_JOIN", "req_id": "j", "room_id": room_id}))
    if (joined := await _answer(ws, "j", timeout)).get("type") != "ROOM_BATCH":
        raise RuntimeError(f"ROOM_JOIN refused: {joined}")
    ws.send_text(json.dumps({"type": "PRESENCE_SUB", "req_id": "p", "user_ids": watched}))
    if (acked := await _answer(ws, "p", timeout)).get("type") != "ACK":
        raise RuntimeError(f"PRESENCE_SUB refused: {acked}")
    ws.on_text = lambda payload: None
    while not ws._inbox.empty():  # pushes that came before on_text was set
        ws._inbox.get_nowait()
    return ws


async def open_all_idle(target: Target, members: list[tuple[tuple[str, str, list[str]], str]], concurrency: int = 50) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(spec: tuple[str, str, list[str]], token: str) -> Any:
        async with gate:
            for attempt in range(3):
                try:
                    return await open_idle_member(target, spec, token)
                except (OSError, TimeoutError, asyncio.TimeoutError, ConnectionError):
                    if attempt == 2:
                        raise
                    await asyncio.sleep(0.5)

    return list(await asyncio.gather(*(one(spec, token) for spec, token in members)))
