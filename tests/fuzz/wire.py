"""Real sockets for the frame fuzzer, on an event loop of their own so that hypothesis (which
drives plain functions) can run one exchange per example."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import websockets

# protocol.md §4: the only codes an ERROR may carry.
PROTOCOL_CODES = {
    "bad_frame", "unknown_type", "unauthenticated", "forbidden", "not_found", "rate_limited",
    "too_large", "window_expired", "unknown_custom_type", "room_limit", "conflict", "internal",
    "bad_request",
}
CLOSE_UNAUTHENTICATED = 4401
TIMEOUT_S = 30.0

_sentinels = itertools.count(1)


def check_server_frame(frame: Any) -> None:
    """What every frame from the server must be; an `internal` ERROR is a server bug."""
    assert isinstance(frame, dict) and isinstance(frame.get("type"), str), frame
    if frame["type"] == "ERROR":
        assert frame["code"] in PROTOCOL_CODES, frame
        assert frame["code"] != "internal", frame
        assert isinstance(frame["message"], str) and frame["message"], frame
        assert frame.get("retry_after_ms", 0) >= 0, frame


async def recv_frame(ws: websockets.ClientConnection) -> dict[str, Any]:
    try:
        message = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
    except websockets.ConnectionClosed as closed:
        code = closed.rcvd.code if closed.rcvd else None
        raise AssertionError(f"the server closed the connection ({code})") from None
    frame = json.loads(message)
    check_server_frame(frame)
    return frame


async def round_trip(ws: websockets.ClientConnection, text: str | bytes) -> list[dict[str, Any]]:
    """Send `text`, then a PING; every frame received up to its PONG (the connection handles
    frames in order, so the answer to `text` is among them)."""
    sentinel = f"sentinel-{next(_sentinels)}"
    await ws.send(text)
    await ws.send(json.dumps({"type": "PING", "req_id": sentinel}))
    frames = []
    while True:
        frame = await recv_frame(ws)
        if frame["type"] == "PONG" and frame.get("req_id") == sentinel:
            return frames
        frames.append(frame)


async def ping(ws: websockets.ClientConnection) -> None:
    """A PONG comes back (pushes before it are checked and skipped)."""
    assert await round_trip(ws, json.dumps({"type": "PING"})) is not None


async def open_authed(ws_url: str, token: str, device_id: str) -> websockets.ClientConnection:
    ws = await websockets.connect(ws_url, max_size=None)
    await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": device_id}))
    assert (await recv_frame(ws))["type"] == "AUTH_OK"
    return ws


async def refused_before_auth(ws_url: str, first: str | bytes) -> dict[str, Any]:
    """Open a socket, send `first` as its first frame: ERROR unauthenticated, then 4401."""
    async with websockets.connect(ws_url, max_size=None) as ws:
        await ws.send(first)
        error = await recv_frame(ws)
        assert (error["type"], error["code"]) == ("ERROR", "unauthenticated"), error
        try:
            extra = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == CLOSE_UNAUTHENTICATED, closed
        else:
            raise AssertionError(f"a frame after the refusal: {extra!r}")
        return error


class LoopThread:
    """One event loop kept across hypothesis examples, so sockets stay open between them."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT_S * 4))

    def close(self) -> None:
        self.loop.close()


class LogWatch:
    """The node's log since the last look: no traceback and no ERROR from qim may appear."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size

    def assert_clean(self) -> None:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            data = log.read()
        self.offset += len(data)
        new = data.decode(errors="replace")
        bad = [line for line in new.splitlines() if "Traceback" in line or " ERROR " in line]
        assert not bad, "server log:\n" + new[-4000:]
