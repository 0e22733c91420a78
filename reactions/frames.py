"""REACT (protocol.md §7)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from qim.conf import limit
from qim.node.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.infra.ratelimit import check_rate
from reactions.actions import ReactRequest
from reactions.batcher import get_batcher

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
    apart from per_user_msg_rate (design §4). Applied in a batch with the REACTs to the same
    message that arrive meanwhile (reactions/batcher.py), which pushes after commit."""
    await check_rate("per_user_reaction_rate", limit("per_user_reaction_rate"), str(conn.tenant_id), conn.user_id)
    outcome = await get_batcher().submit(
        (conn.tenant_id, frame.conversation_id, frame.conversation_seq),
        ReactRequest(conn.user_pk, frame.reaction_key, frame.action),
    )
    return {"type": "ACK", "counts": outcome.counts, "summary_version": outcome.summary_version}
