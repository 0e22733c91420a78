"""Shared steps of room tests."""

from __future__ import annotations

import itertools

from qimclient import QimClient
from tests.harness.personas import Persona, api_ok

_rooms = itertools.count(1)
EPOCH_SHIFT = 48


def create_room(persona: Persona, title: str = "lobby") -> str:
    room_id = f"room-{next(_rooms)}-{persona.user_id}".lower()[:64]
    api_ok(persona.tenant.node, "POST", "rooms", persona.token(), json={"room_id": room_id, "title": title})
    return room_id


async def join(client: QimClient, room_id: str, after: int | None = None) -> dict:
    fields = {"room_id": room_id}
    if after is not None:
        fields["after_room_seq"] = after
    return await client.request("ROOM_JOIN", **fields)


async def room_send(client: QimClient, room_id: str, text: str, **extra) -> dict:  # type: ignore[no-untyped-def]
    return await client.request("ROOM_SEND", room_id=room_id, content_type="text", payload={"text": text}, **extra)


def epoch_of(room_seq: int) -> int:
    return room_seq >> EPOCH_SHIFT


def counter_of(room_seq: int) -> int:
    return room_seq & ((1 << EPOCH_SHIFT) - 1)


async def collect_room_events(client: QimClient, room_id: str, want: int, timeout: float = 30.0) -> list[dict]:
    """ROOM_BATCH pushes until `want` events arrived (or `timeout`, generous for a loaded
    machine: the wait ends with the last one); answers the events in arrival order."""
    import asyncio
    import time

    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(events) < want:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            frame = await client.next_push(timeout=remaining, type="ROOM_BATCH")
        except (TimeoutError, asyncio.TimeoutError):
            break
        if frame["room_id"] == room_id:
            events += frame["events"]
    return events
