"""ROOM_JOIN, ROOM_LEAVE, ROOM_SEND, ROOM_REPLAY (protocol.md §8)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from qim.conf import limit
from qim.content_types import check_send_policy
from qim.errors import Refused
from qim.frames.messaging import check_payload
from qim.infra import codec
from qim.node.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.node.fit import reply_items_budget
from qim.node.connection_node import on_disconnect
from rooms.access import check_room_exists
from rooms.join_batches import get_join_batches
from rooms.local import LocalRoom
from rooms.service import get_room_service, room_key

RoomId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_-]{1,64}$")]
RoomSeq = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]


class RoomJoin(msgspec.Struct):
    room_id: RoomId
    after_room_seq: RoomSeq | None = None
    req_id: str | None = None
    type: str = "ROOM_JOIN"


class RoomLeave(msgspec.Struct):
    room_id: RoomId
    req_id: str | None = None
    type: str = "ROOM_LEAVE"


class RoomSend(msgspec.Struct):
    room_id: RoomId
    content_type: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    payload: Any
    client_msg_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    req_id: str | None = None
    type: str = "ROOM_SEND"


class RoomReplay(msgspec.Struct):
    room_id: RoomId
    after_room_seq: RoomSeq
    req_id: str | None = None
    type: str = "ROOM_REPLAY"


def batch_reply(body: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in body.items() if k not in ("online_count", "nodes")}
    return {"type": "ROOM_BATCH", **body}


def joined_room(conn: Connection, room_id: str) -> LocalRoom:
    room = get_room_service().local.rooms.get(room_key(conn.tenant_id, room_id))
    if room is None or (conn not in room.members and conn not in room.joining):
        raise Refused("forbidden", f"join room {room_id!r} first")
    return room


@frame_handler("ROOM_JOIN", RoomJoin, foreground=False)
async def handle_room_join(conn: Connection, frame: RoomJoin) -> dict | None:
    """Join (or rejoin) a room; the reply is a ROOM_BATCH, a replay when after_room_seq is
    given (cut by size like ROOM_REPLAY's, `has_more` then). Live ROOM_BATCH pushes follow,
    never older than the reply's latest_room_seq."""
    await check_room_exists(conn.tenant_id, frame.room_id)
    key = room_key(conn.tenant_id, frame.room_id)
    if frame.room_id not in conn.rooms and len(conn.rooms) >= limit("max_rooms_per_connection"):
        raise Refused("room_limit", f"at most {limit('max_rooms_per_connection'):g} rooms per connection")
    service = get_room_service()
    service.ensure_started()  # this node re-reports its counts from now on (RoomService._report_once)
    room = service.local.begin_join(conn, key, frame.room_id)
    try:
        body = await get_join_batches(service).join(key, frame.after_room_seq, reply_items_budget(frame.req_id))
    except Exception:
        service.local.abort_join(room, conn)
        raise
    if not service.local.accept_epoch(room, body["room_epoch"]):
        # Answered by a writer that lost its lease meanwhile: the client joins again.
        service.local.abort_join(room, conn)
        raise Refused("conflict", "the room's writer changed during the join; retry", retry_after_ms=100)
    reply = batch_reply(body)
    if frame.req_id is not None:
        reply["req_id"] = frame.req_id
    await conn.send_text(codec.encode(reply))
    await service.local.finish_join(room, conn, body["latest_room_seq"])
    return None


async def leave(conn: Connection, room_id: str) -> None:
    service = get_room_service()
    key = room_key(conn.tenant_id, room_id)
    if service.local.leave(conn, key, room_id):
        await service.report_count(key)


@frame_handler("ROOM_LEAVE", RoomLeave, foreground=False)
async def handle_room_leave(conn: Connection, frame: RoomLeave) -> dict:
    await leave(conn, frame.room_id)
    return {"type": "ACK"}


@on_disconnect
async def leave_all_rooms(conn: Connection) -> None:
    get_room_service().local.forget_connection(conn)
    for room_id in list(conn.rooms):
        await leave(conn, room_id)


@frame_handler("ROOM_SEND", RoomSend, foreground=False)
async def handle_room_send(conn: Connection, frame: RoomSend) -> dict:
    """Through the registry like SEND; answered by the room's writer, wherever it is."""
    joined_room(conn, frame.room_id)
    policy = await check_send_policy(conn.tenant_id, frame.content_type, "send")
    check_payload(frame.content_type, frame.payload, policy.max_payload_bytes)
    ack = await get_room_service().call_writer(
        room_key(conn.tenant_id, frame.room_id),
        "room.send",
        {"sender_id": conn.user_id, "content_type": frame.content_type, "payload": frame.payload,
         "client_msg_id": frame.client_msg_id},
    )
    return {"type": "ACK", **ack}


@frame_handler("ROOM_REPLAY", RoomReplay, foreground=False)
async def handle_room_replay(conn: Connection, frame: RoomReplay) -> dict:
    """A ROOM_BATCH of the oldest events after the position that fit in one frame; with
    `has_more`, the client asks again after the last one (protocol.md §8)."""
    room = joined_room(conn, frame.room_id)
    body = await get_room_service().call_writer(
        room.key, "room.replay", {"after": frame.after_room_seq, "max_bytes": reply_items_budget(frame.req_id)},
    )
    if not get_room_service().local.accept_epoch(room, body["room_epoch"]):
        raise Refused("conflict", "the room's writer changed during the replay; retry", retry_after_ms=100)
    return batch_reply(body)
