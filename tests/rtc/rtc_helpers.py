"""Shared steps of RTC tests: a direct conversation, one signal, the next signal, records."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

from qimclient import QimClient
from tests.conftest import QimDeployment
from tests.harness.personas import Persona, api_ok

CALL_RECORD = "qim.call_record.v1"
_calls = itertools.count(1)


def new_call_id() -> str:
    return f"call-{os.getpid()}-{next(_calls)}"


def direct(a: Persona, b: Persona) -> str:
    answer = api_ok(a.tenant.node, "POST", "conversations", a.token(),
                    json={"kind": "direct", "member_user_ids": [b.user_id]})
    return answer["conversation_id"]


async def signal(
    client: QimClient, conversation_id: str, target: Persona, call_id: str, action: str,
    payload: Any = None,
) -> dict:
    fields: dict[str, Any] = {
        "conversation_id": conversation_id, "target_user_id": target.user_id, "call_id": call_id,
        "action": action,
    }
    if payload is not None:
        fields["signal_payload"] = payload
    return await client.request("RTC_SIGNAL", **fields)


async def next_signal(client: QimClient, timeout: float = 30) -> dict:
    """The next RTC_SIGNAL push; the wait ends when it arrives (generous for a loaded machine)."""
    return await client.next_push(timeout=timeout, type="RTC_SIGNAL")


def rtc_pushes(client: QimClient) -> list[dict]:
    """The RTC_SIGNAL pushes queued now (drains the queue)."""
    return [f for f in client.drain_pushes() if f.get("type") == "RTC_SIGNAL"]


async def call_records(client: QimClient, conversation_id: str) -> list[dict]:
    batch = await client.request("HISTORY", conversation_id=conversation_id)
    return [m for m in batch["messages"] if m["content_type"] == CALL_RECORD]


def record_rows(deployment: QimDeployment, call_id: str) -> int:
    return deployment.db.count("rtc_callrecord", "call_id = ?", (call_id,))


async def unread_of(client: QimClient, conversation_id: str) -> int:
    listing = await client.request("CONVERSATIONS")
    return next(i["unread"] for i in listing["items"] if i["conversation_id"] == conversation_id)


async def wait_until_registry(client: QimClient, custom_type: str, timeout: float = 60, **fields: Any) -> None:
    """Poll REGISTRY_GET on the client's node until `custom_type` shows `fields` there (each
    node re-reads a changed registry within a second, later on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        types = (await client.request("REGISTRY_GET", since_version=0))["types"]
        shown = next((t for t in types if t["custom_type"] == custom_type), {})
        if all(shown.get(k) == v for k, v in fields.items()):
            return
        assert time.monotonic() < deadline, f"{custom_type} not {fields} on the node after {timeout} s: {shown}"
        await asyncio.sleep(0.1)
