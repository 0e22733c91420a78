"""Shared steps of conversation tests: make a group, send text, read history."""

from __future__ import annotations

import itertools

from qimclient import QimClient
from tests.harness.personas import Persona, api_ok

_client_msg = itertools.count(1)


def create_group(owner: Persona, *members: Persona, title: str = "team") -> str:
    answer = api_ok(
        owner.tenant.node, "POST", "conversations", owner.token(),
        json={"kind": "group", "title": title, "member_user_ids": [m.user_id for m in members]},
    )
    return answer["conversation_id"]


async def send_text(client: QimClient, conversation_id: str, text: str, client_msg_id: str | None = None) -> dict:
    return await client.request(
        "SEND",
        conversation_id=conversation_id,
        client_msg_id=client_msg_id or f"m{next(_client_msg)}",
        content_type="text",
        payload={"text": text},
    )


async def history_texts(client: QimClient, conversation_id: str, **kwargs) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    batch = await client.request("HISTORY", conversation_id=conversation_id, **kwargs)
    return [
        (m["conversation_seq"], m["payload"]["text"] if m["content_type"] == "text" else m["content_type"])
        for m in batch["messages"]
    ]


async def sync_all(client: QimClient, after: int = 0, limit: int | None = None) -> tuple[list[dict], int]:
    """Page through SYNC until has_more is false; answers the events and the final cursor."""
    events: list[dict] = []
    while True:
        fields = {"after_mailbox_seq": after}
        if limit is not None:
            fields["limit"] = limit
        batch = await client.request("SYNC", **fields)
        events += batch["events"]
        after = batch["next_mailbox_seq"]
        if not batch["has_more"]:
            return events, after
