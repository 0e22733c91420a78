"""SEND, SYNC, HISTORY, CONVERSATIONS and TYPING (protocol.md §5)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from qim.actions.messages import SendAck, SendRequest, do_send_messages
from qim.gateway.batching import KeyedBatcher
from qim.conf import limit
from qim.clock import now_ms
from qim.content_types import (
    ANCHOR_TARGET,
    EPHEMERAL,
    PERSISTENT,
    TEXT,
    check_send_policy,
)
from qim.gateway.db import in_db_thread
from qim.errors import Refused
from qim.infra import codec
from qim.node.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.node.fit import reply_items_budget
from qim.node.connection_node import get_node
from qim.models import new_ulid
from qim.notify import UserPush
from qim.queries.conversations import (
    HistoryPage,
    access_conversation,
    access_member_intervals,
    current_members,
    history,
    require_current_member,
)
from qim.queries.conversation_list import ListCursor, conversation_page
from qim.queries.mailbox import SyncPage, SyncRequest, sync_pages
from qim.queries.retention import history_truncated
from qim.infra.ratelimit import check_rate, take_rate

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Seq = Annotated[int, msgspec.Meta(ge=0)]
Limit = Annotated[int, msgspec.Meta(ge=1)]


class Send(msgspec.Struct):
    conversation_id: Id
    client_msg_id: Id
    content_type: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    payload: Any
    # Required by (and only by) persistent types whose anchor_mode is anchor_target.
    target_conversation_seq: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # Issue #34: user ids mentioned (current members), @all (the group's policy decides), and
    # the conversation_seq this message replies to.
    mentions: list[Id] | None = None
    mention_all: bool = False
    reply_to: Annotated[int, msgspec.Meta(ge=1)] | None = None
    req_id: str | None = None
    type: str = "SEND"


class Sync(msgspec.Struct):
    after_mailbox_seq: Seq = 0
    limit: Limit | None = None
    req_id: str | None = None
    type: str = "SYNC"


class History(msgspec.Struct):
    conversation_id: Id
    before_seq: Seq | None = None
    after_seq: Seq | None = None
    limit: Limit | None = None
    req_id: str | None = None
    type: str = "HISTORY"


class Before(msgspec.Struct):
    """A CONVERSATION_LIST position, exclusive: a previous page's `next_before`."""

    last_activity_ms: Annotated[int, msgspec.Meta(ge=0)]
    conversation_id: Id


class Conversations(msgspec.Struct):
    before: Before | None = None
    limit: Limit | None = None
    req_id: str | None = None
    type: str = "CONVERSATIONS"


class Typing(msgspec.Struct):
    conversation_id: Id
    state: Literal["start", "stop"]
    req_id: str | None = None
    type: str = "TYPING"


def check_payload(content_type: str, payload: Any, max_bytes: int) -> str:
    """The payload's compact JSON, measured in UTF-8 bytes; the server never looks inside
    except for the built-in `text` shape."""
    payload_json = codec.encode(payload)
    size = len(payload_json.encode())
    if size > max_bytes:
        raise Refused("too_large", f"payload is {size} bytes; {content_type} allows {max_bytes}")
    if content_type == TEXT:
        if not (isinstance(payload, dict) and isinstance(payload.get("text"), str)):
            raise Refused("bad_frame", 'a text payload is {"text": "..."}')
    return payload_json


@frame_handler("SEND", Send)
async def handle_send(conn: Connection, frame: Send) -> dict:
    """Persistent types go the mailbox path; ephemeral ones are relayed to the members online
    now; ephemeral_aggregate types are REACT's, never SEND's (design §3)."""
    policy = await check_send_policy(conn.tenant_id, frame.content_type, "SEND")
    payload_json = check_payload(frame.content_type, frame.payload, policy.max_payload_bytes)
    anchored = policy.delivery_class == PERSISTENT and policy.anchor_mode == ANCHOR_TARGET
    if anchored != (frame.target_conversation_seq is not None):
        raise Refused("bad_frame", "target_conversation_seq goes with (and only with) anchor_target types")
    if policy.delivery_class == EPHEMERAL:
        await check_rate("per_user_msg_rate", limit("per_user_msg_rate"), str(conn.tenant_id), conn.user_id)
        return await relay_ephemeral(conn, frame, payload_json)
    # One DB-thread call checks and writes (qim/actions/messages.py): a retry gets its first
    # ACK and a non-member `forbidden` even past the rate; both count against it.
    mentions = checked_mentions(frame.mentions)
    request = SendRequest(
        conn.user, conn.device_id, frame.client_msg_id, policy, payload_json, frame.target_conversation_seq,
        rate_refusal=await take_rate("per_user_msg_rate", limit("per_user_msg_rate"), str(conn.tenant_id), conn.user_id),
        mentions=mentions, mention_all=frame.mention_all, reply_to=frame.reply_to,
    )
    ack = await send_batcher.submit(frame.conversation_id, request)
    return ack.frame()


def checked_mentions(mentions: list[str] | None) -> tuple[str, ...]:
    """The mentioned user ids once each, in the order sent; `bad_request` past
    max_mentions_per_message. Membership is checked under the conversation's lock."""
    unique = tuple(dict.fromkeys(mentions or ()))
    most = int(limit("max_mentions_per_message"))
    if len(unique) > most:
        raise Refused("bad_request", f"at most {most} mentions per message; this one names {len(unique)}")
    return unique


# SENDs to one conversation queue on its row lock; the ones that arrive while a write runs
# are checked and written together by the next (qim/gateway/batching.py).
send_batcher: KeyedBatcher[str, SendRequest, SendAck] = KeyedBatcher("send", do_send_messages)


async def relay_ephemeral(conn: Connection, frame: Send, payload_json: str) -> dict:
    """EPHEMERAL to the other members online now: no row, no seq, no mailbox (§10)."""
    recipients = await in_db_thread(other_members)(conn, frame.conversation_id)
    sent_at_ms = now_ms()
    text = (
        '{"type":"EPHEMERAL","conversation_id":' + codec.encode(frame.conversation_id)
        + ',"sender_id":' + codec.encode(conn.user_id)
        + ',"sender_device_id":' + codec.encode(conn.device_id)
        + ',"content_type":' + codec.encode(frame.content_type)
        + ',"payload":' + payload_json + ',"sent_at_ms":' + str(sent_at_ms) + "}"
    )
    await get_node().send_to_users(UserPush(tenant_id=conn.tenant_id, user_ids=recipients, text=text))
    return {"type": "ACK", "message_id": new_ulid(), "sent_at_ms": sent_at_ms}


def other_members(conn: Connection, conversation_id: str) -> list[str]:
    """Current members but the caller; `not_found`/`forbidden` for outsiders."""
    conversation = access_conversation(conn.tenant_id, conversation_id)
    require_current_member(conversation, conn.user_pk)
    return [u for u in current_members(conversation.pk).values() if u != conn.user_id]


def _sync_pages(_key: None, requests: list[SyncRequest]) -> list[SyncPage]:
    return sync_pages(requests)


# SYNCs that arrive while one is read go together in the next read: after a reconnect storm
# every client SYNCs at once (docs/performance.md,
# "Lean handshake, upgrade, frame and per-socket paths").
sync_batcher: KeyedBatcher[None, SyncRequest, SyncPage] = KeyedBatcher("sync", _sync_pages, max_items=200)


@frame_handler("SYNC", Sync)
async def handle_sync(conn: Connection, frame: Sync) -> dict:
    """A page of the mailbox after the cursor, under the outbound frame cap with its req_id
    (cut by size: `has_more`, the cursor at the last event sent)."""
    page = await sync_batcher.submit(None, SyncRequest(
        conn.user_pk, conn.device_id, frame.after_mailbox_seq, frame.limit, reply_items_budget(frame.req_id)
    ))
    reply = {
        "type": "SYNC_BATCH",
        "events": page.events_json,
        "next_mailbox_seq": page.next_mailbox_seq,
        "has_more": page.has_more,
    }
    if page.history_truncated:
        reply["history_truncated"] = True  # retention deleted entries after the cursor (§6.2)
    return reply


@frame_handler("HISTORY", History)
async def handle_history(conn: Connection, frame: History) -> dict:
    """A page of the timeline under the outbound frame cap with its req_id; `has_more` when
    rows beyond it exist in the direction of paging (protocol.md §6.3)."""
    max_bytes = reply_items_budget(frame.req_id)

    def read() -> tuple[HistoryPage, bool]:
        conversation = access_conversation(conn.tenant_id, frame.conversation_id)
        intervals = access_member_intervals(conversation, conn.user_pk)
        page = history(
            conversation, intervals,
            before_seq=frame.before_seq, after_seq=frame.after_seq, limit=frame.limit, max_bytes=max_bytes,
        )
        return page, history_truncated(
            conversation, intervals, after_seq=frame.after_seq, before_seq=frame.before_seq, has_more=page.has_more
        )

    page, truncated = await in_db_thread(read)()
    reply = {
        "type": "HISTORY_BATCH",
        "conversation_id": frame.conversation_id,
        "messages": page.messages_json,
        "has_more": page.has_more,
    }
    if truncated:
        reply["history_truncated"] = True  # retention deleted rows where this page reaches (§6.3)
    return reply


@frame_handler("CONVERSATIONS", Conversations)
async def handle_conversations(conn: Connection, frame: Conversations) -> dict:
    """A page of the list, newest activity first, after `before`, under the outbound frame cap
    with its req_id; `badge` is the whole list's (protocol.md §6.4). Without `before` and
    `limit`, the whole list when it fits, as before paging existed."""
    before = ListCursor(frame.before.last_activity_ms, frame.before.conversation_id) if frame.before else None
    page = await in_db_thread(conversation_page)(
        conn.user, before=before, limit=frame.limit, max_bytes=reply_items_budget(frame.req_id)
    )
    reply = {"type": "CONVERSATION_LIST", "items": page.items_json, "badge": page.badge, "has_more": page.has_more}
    cursor = page.next_before()
    if cursor is not None:
        reply["next_before"] = cursor.frame()
    return reply


@frame_handler("TYPING", Typing)
async def handle_typing(conn: Connection, frame: Typing) -> dict | None:
    """Relayed to the other members online now; nothing is stored. No reply unless refused
    (or asked for with a req_id)."""
    recipients = await in_db_thread(other_members)(conn, frame.conversation_id)
    text = codec.encode(
        {"type": "TYPING", "conversation_id": frame.conversation_id, "user_id": conn.user_id, "state": frame.state}
    )
    await get_node().send_to_users(UserPush(tenant_id=conn.tenant_id, user_ids=recipients, text=text))
    return {"type": "ACK"} if frame.req_id is not None else None
