"""REACT (protocol.md §7)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

import msgspec

from qim.conf import limit
from qim.db import in_db_thread
from qim.gateway.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.queries.conversations import access_conversation
from qim.ratelimit import check_rate
from reactions.actions import ReactOutcome, do_react
from reactions.pusher import get_pusher

ReactionKey = Annotated[str, msgspec.Meta(min_length=1, max_length=32, pattern=r"^\S+$")]


class React(msgspec.Struct):
    conversation_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    conversation_seq: Annotated[int, msgspec.Meta(ge=1)]
    reaction_key: ReactionKey
    action: Literal["add", "remove"]
    req_id: str | None = None
    type: str = "REACT"


@frame_handler("REACT", React)
async def handle_react(conn: Connection, frame: React) -> dict:
    """Idempotent add/remove; the ACK carries the absolute counts. Its own rate budget,
    apart from per_user_msg_rate (design §4)."""
    await check_rate("per_user_reaction_rate", limit("per_user_reaction_rate"), str(conn.tenant_id), conn.user_id)

    def react() -> ReactOutcome:
        conversation = access_conversation(conn.tenant_id, frame.conversation_id)
        return do_react(conversation, conn.user, frame.conversation_seq, frame.reaction_key, frame.action)

    outcome = await in_db_thread(react)()
    if outcome.changed:
        # Off the request path: the ACK does not wait for the fan-out.
        asyncio.create_task(get_pusher().changed(
            conn.tenant_id, outcome.conversation_id, outcome.conversation_seq, outcome.counts, outcome.summary_version
        ))
    return {"type": "ACK", "counts": outcome.counts, "summary_version": outcome.summary_version}
