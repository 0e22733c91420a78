"""A raw WebSocket client that cannot take a message over the outbound frame cap, the way a
client configured with the server's limit reads (websockets closes with 1009 past its
max_size), and records the exact size and arrival time of every frame it reads."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Self

import pytest
import websockets

from tests.harness.personas import Persona


@dataclass
class CappedReader:
    """Frames are read as they come, in a task; `frames` holds (arrival, UTF-8 bytes, frame)."""

    ws: Any
    cap: int
    frames: list[tuple[float, int, dict]] = field(default_factory=list)
    inbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    task: asyncio.Task | None = None

    @classmethod
    async def open(cls, persona: Persona, cap: int, device_id: str = "phone") -> Self:
        ws = await websockets.connect(persona.tenant.node.ws_url, max_size=cap, compression=None)
        reader = cls(ws, cap)
        reader.task = asyncio.create_task(reader._read())
        await reader.send({"type": "AUTH", "token": persona.token(device_id), "device_id": device_id})
        auth_ok = await reader.recv()
        assert (auth_ok["type"], auth_ok["limits"]["max_outbound_frame_bytes"]) == ("AUTH_OK", cap)
        return reader

    async def _read(self) -> None:
        async for text in self.ws:  # ends with the connection; a frame over the cap ends it
            frame = json.loads(text)
            self.frames.append((time.monotonic(), len(text.encode()), frame))
            self.inbox.put_nowait(frame)

    async def close(self) -> None:
        await self.ws.close()
        if self.task is not None:
            await self.task

    async def send(self, frame: dict) -> None:
        await self.ws.send(json.dumps(frame))

    async def recv(self, timeout: float = 10.0) -> dict:
        return await asyncio.wait_for(self.inbox.get(), timeout)

    async def request(self, frame: dict) -> dict:
        await self.send(frame)
        while True:
            reply = await self.recv()
            if reply.get("req_id") == frame["req_id"]:
                return reply

    async def assert_nothing_more(self, seconds: float = 0.5) -> None:
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            extra = await self.recv(seconds)
            pytest.fail(f"unexpected frame: {summary(extra)}")
        assert self.ws.close_code is None, f"closed: {self.ws.close_code} {self.ws.close_reason}"

    def assert_under_cap(self) -> None:
        assert all(size <= self.cap for _, size, _ in self.frames), max(size for _, size, _ in self.frames)


def summary(frame: dict) -> str:
    """A frame without its bulk: the seqs of the events or messages it carries."""
    listed = {key: frame[key] for key in ("events", "messages") if key in frame}
    rest = {key: value for key, value in frame.items() if key not in listed}
    seqs = {key: [item.get("room_seq", item.get("mailbox_seq", item.get("conversation_seq"))) for item in items]
            for key, items in listed.items()}
    return f"{rest} {seqs}"
