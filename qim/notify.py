"""The one way pushes leave: after the transaction that wrote what they announce commits.

Actions call `push_on_commit`; the push goes out through this process's ConnectionNode,
grouped by node. A rollback sends nothing. From a thread that asgiref runs for async code the
push runs on daphne's event loop; elsewhere (a management command) on a loop of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from asgiref.sync import async_to_sync
from django.db import transaction

logger = logging.getLogger(__name__)


@dataclass
class UserPush:
    """One frame for many users. `text` is the same for all; or each user's frame is
    `head + per_user[user_id] + tail` (mailbox events differ only in mailbox_seq), so the
    body is still encoded once."""

    tenant_id: int
    user_ids: list[str]
    text: str | None = None
    head: str = ""
    tail: str = ""
    per_user: dict[str, str] = field(default_factory=dict)
    exclude_device: tuple[str, str] | None = None


async def deliver(push: UserPush) -> None:
    from qim.gateway.node import get_node

    await get_node().send_to_users(push)


def push_on_commit(push: UserPush) -> None:
    """Send `push` once the current transaction commits (at once outside a transaction)."""

    def send() -> None:
        try:
            async_to_sync(deliver)(push)
        except Exception:
            # Pushes are best effort; the mailbox is the truth and SYNC heals.
            logger.exception("push after commit failed")

    transaction.on_commit(send)
