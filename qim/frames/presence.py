"""Presence subscriptions and ping."""

from __future__ import annotations

import msgspec

from qim.clock import now_ms
from qim.errors import Refused
from qim.node.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.node.connection_node import get_node

MAX_PRESENCE_WATCH = 1000


class PresenceSub(msgspec.Struct):
    user_ids: list[str]
    req_id: str | None = None
    type: str = "PRESENCE_SUB"


class PresenceUnsub(msgspec.Struct):
    user_ids: list[str]
    req_id: str | None = None
    type: str = "PRESENCE_UNSUB"


class Ping(msgspec.Struct):
    req_id: str | None = None
    type: str = "PING"


@frame_handler("PRESENCE_SUB", PresenceSub)
async def handle_presence_sub(conn: Connection, frame: PresenceSub) -> dict:
    """Answer who of `user_ids` is online now, then push PRESENCE on each change.

    Presence is not secret within a tenant, and the ids never leave it: a user id of another
    tenant simply names nobody here, so it reads as offline.
    """
    wanted = list(dict.fromkeys(frame.user_ids))
    if len(conn.presence_watch | set(wanted)) > MAX_PRESENCE_WATCH:
        raise Refused("too_large", f"at most {MAX_PRESENCE_WATCH} watched users per connection")
    node = get_node()
    for user_id in wanted:
        await node.watch_presence(conn, user_id)
    presence = await node.directory.online(conn.tenant_id, wanted)
    conn.presence_told.update(presence)
    return {"type": "ACK", "presence": presence}


@frame_handler("PRESENCE_UNSUB", PresenceUnsub)
async def handle_presence_unsub(conn: Connection, frame: PresenceUnsub) -> dict:
    node = get_node()
    for user_id in frame.user_ids:
        await node.unwatch_presence(conn, user_id)
    return {"type": "ACK"}


@frame_handler("PING", Ping)
async def handle_ping(conn: Connection, frame: Ping) -> dict:
    return {"type": "PONG", "server_time_ms": now_ms()}
