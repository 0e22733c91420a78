"""MARK_READ, RECALL and EDIT (protocol.md §5; design §2)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from django.db import transaction

from qim.actions.edit import check_edit_message
from qim.actions.read_sync import MarkedRead, check_mark_read
from qim.actions.recall import check_recall_message
from qim.clock import now_ms
from qim.gateway.db import in_db_thread
from qim.node.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.queries.conversations import access_conversation
from qim.gateway.read_sync import get_read_sync_flusher

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Seq = Annotated[int, msgspec.Meta(ge=0)]
TargetSeq = Annotated[int, msgspec.Meta(ge=1)]


class MarkRead(msgspec.Struct):
    conversation_id: Id
    read_conversation_seq: Seq
    req_id: str | None = None
    type: str = "MARK_READ"


class Recall(msgspec.Struct):
    conversation_id: Id
    conversation_seq: TargetSeq
    req_id: str | None = None
    type: str = "RECALL"


class Edit(msgspec.Struct):
    conversation_id: Id
    conversation_seq: TargetSeq
    payload: Any
    # Issue #34: when given, the message's new mentions (replacing the old) and @all.
    mentions: list[Id] | None = None
    mention_all: bool | None = None
    req_id: str | None = None
    type: str = "EDIT"


@frame_handler("MARK_READ", MarkRead)
async def handle_mark_read(conn: Connection, frame: MarkRead) -> dict:
    def mark() -> MarkedRead:
        with transaction.atomic():
            conversation = access_conversation(conn.tenant_id, frame.conversation_id)
            return check_mark_read(conn.user, conn.device_id, conversation, frame.read_conversation_seq, now_ms())

    marked = await in_db_thread(mark)()
    if marked.flush_due_at_ms is not None:
        get_read_sync_flusher().schedule(marked.flush_due_at_ms)
    return marked.frame()


@frame_handler("RECALL", Recall)
async def handle_recall(conn: Connection, frame: Recall) -> dict:
    def recall() -> int:
        access_conversation(conn.tenant_id, frame.conversation_id)
        return check_recall_message(conn.user, conn.device_id, frame.conversation_id, frame.conversation_seq)

    return {"type": "ACK", "event_conversation_seq": await in_db_thread(recall)()}


@frame_handler("EDIT", Edit)
async def handle_edit(conn: Connection, frame: Edit) -> dict:
    def edit() -> int:
        access_conversation(conn.tenant_id, frame.conversation_id)
        return check_edit_message(
            conn.user, conn.device_id, frame.conversation_id, frame.conversation_seq, frame.payload,
            mentions=frame.mentions, mention_all=frame.mention_all,
        )

    return {"type": "ACK", "event_conversation_seq": await in_db_thread(edit)()}
