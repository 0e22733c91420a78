"""REGISTRY_GET, and each node's side of a registry change: REGISTRY_UPDATED to its sockets."""

from __future__ import annotations

from typing import Any

import msgspec

from qim.infra import codec
from qim.node.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.node.connection_node import ConnectionNode, node_message_handler
from registry.cache import registry_cache
from registry.hot_reload import MESSAGE_TYPE, REGISTRY_GROUP


class RegistryGet(msgspec.Struct):
    since_version: int = 0
    req_id: str | None = None
    type: str = "REGISTRY_GET"


@frame_handler("REGISTRY_GET", RegistryGet)
async def handle_registry_get(conn: Connection, frame: RegistryGet) -> dict:
    """The types changed after `since_version` (all of them from 0), disabled ones included so
    that old messages keep rendering."""
    snapshot = await registry_cache.get(conn.tenant_id)
    return {
        "type": "REGISTRY",
        "registry_version": snapshot.version,
        "types": snapshot.changed_since(frame.since_version),
    }


@node_message_handler(MESSAGE_TYPE, group=REGISTRY_GROUP)
async def on_registry_changed(node: ConnectionNode, message: dict[str, Any]) -> None:
    tenant_id = message["tenant"]
    registry_cache.invalidate(tenant_id)
    text = codec.encode({"type": "REGISTRY_UPDATED", "registry_version": message["version"]})
    for conn in node.local_connections_of_tenant(tenant_id):
        await conn.send_text(text)
