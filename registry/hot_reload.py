"""Registry changes reach every node within a second, without a restart.

Two paths, so either one alone is enough: a `registry.changed` message to the channel-layer
group every node's channel belongs to (immediate), and the cache's version check, which
re-reads the tenant's registry_version at most once a second (heals a missed notice, and
covers writers outside daphne such as a data migration on the embedded in-memory layer).
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

REGISTRY_GROUP = "qim.registry"
MESSAGE_TYPE = "registry.changed"


async def broadcast(tenant_id: int, version: int) -> None:
    from registry.cache import registry_cache

    registry_cache.invalidate(tenant_id)
    await get_channel_layer().group_send(
        REGISTRY_GROUP, {"type": MESSAGE_TYPE, "tenant": tenant_id, "version": version}
    )


def announce_on_commit(tenant_id: int, version: int) -> None:
    def send() -> None:
        try:
            async_to_sync(broadcast)(tenant_id, version)
        except Exception:
            logger.exception("announcing registry version %s failed; nodes heal by version check", version)

    transaction.on_commit(send)
