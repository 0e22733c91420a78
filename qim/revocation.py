"""Revocation notices: after a token is revoked or a user deactivated, every node is told at
once to close the sockets that used it (qim/gateway/revocation.py holds the nodes' side).

Best effort, like the registry's notice: a node that misses one still closes those sockets at
its next credentials re-check (QIM_TOKEN_RECHECK_S)."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

CREDENTIALS_GROUP = "qim.credentials"
MESSAGE_TYPE = "credentials.revoked"
# Why a socket lost its credentials, as the ERROR frame's `reason` says it (protocol.md §3).
TOKEN_REVOKED = "token_revoked"
USER_DEACTIVATED = "user_deactivated"
TOKEN_EXPIRED = "token_expired"


async def broadcast(tenant_id: int, user_id: str, digests: list[str] | None, reason: str) -> None:
    """Tell every node; `digests` None means every token of the user."""
    await get_channel_layer().group_send(
        CREDENTIALS_GROUP,
        {"type": MESSAGE_TYPE, "tenant": tenant_id, "user": user_id, "digests": digests, "reason": reason},
    )


def notify_revoked_on_commit(tenant_id: int, user_id: str, digests: list[str] | None, reason: str) -> None:
    """Send the notice once the revocation commits (a rollback revokes nothing)."""

    def send() -> None:
        try:
            async_to_sync(broadcast)(tenant_id, user_id, digests, reason)
        except Exception:
            logger.exception("revocation notice for %s failed; nodes close its sockets at their re-check", user_id)

    transaction.on_commit(send)
