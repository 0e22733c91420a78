"""ROOM_JOIN's room lookups gathered into one query per burst: after a reconnect storm every
client rejoins its room at once, and a query each was a tenth of the node's time
(docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths"). Another tenant's
room answers not_found exactly like a room that does not exist."""

from __future__ import annotations

from qim.gateway.batching import KeyedBatcher
from qim.errors import Refused
from rooms.queries import existing_rooms

# Large enough for a storm's burst in one query, small enough for SQLite's bound variables.
MAX_ROOMS_PER_QUERY = 500


def _check(_key: None, keys: list[tuple[int, str]]) -> list[None | Refused]:
    found = existing_rooms(keys)
    return [None if key in found else Refused("not_found", f"no room {key[1]!r}") for key in keys]


_lookups: KeyedBatcher[None, tuple[int, str], None] = KeyedBatcher("room_lookups", _check, max_items=MAX_ROOMS_PER_QUERY)


async def check_room_exists(tenant_id: int, room_id: str) -> None:
    """Raises Refused not_found unless the tenant has this room: access_room's answer,
    batched (an uncontended lookup runs at once, alone)."""
    await _lookups.submit(None, (tenant_id, room_id))
