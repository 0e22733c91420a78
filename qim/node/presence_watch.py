"""PRESENCE subscriptions on this node: which local connections watch whom, the notices to
the nodes that watch a user who came or went, and the reconciliation that corrects what
watchers were told when a node died without saying so."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from typing import Any

from qim.infra.codec import encode
from qim.node.connection import Connection, UserKey
from qim.node.fanout import BATCH
from qim.node.node_path import NodePath
from qim.node.presence import PresenceDirectory

logger = logging.getLogger(__name__)


def presence_frame(user_id: str, online: bool) -> str:
    return encode({"type": "PRESENCE", "user_id": user_id, "online": online})


class PresenceWatch:
    """Watched user -> this node's connections watching them, mirrored in the directory."""

    def __init__(self, path: NodePath, directory: PresenceDirectory, counters: Counter[str]) -> None:
        self.path = path
        self.node_id = path.node_id
        self.directory = directory
        self.counters = counters
        self.watchers: dict[UserKey, set[Connection]] = defaultdict(set)

    def watchers_of(self, watched: UserKey) -> set[Connection]:
        return self.watchers.get(watched, set())

    async def watch(self, conn: Connection, user_id: str) -> None:
        watched = (conn.tenant_id, user_id)
        conn.presence_watch.add(user_id)
        watchers = self.watchers[watched]
        if not watchers:
            await self.directory.watch(self.node_id, watched)
        watchers.add(conn)

    async def unwatch(self, conn: Connection, user_id: str) -> None:
        watched = (conn.tenant_id, user_id)
        conn.presence_watch.discard(user_id)
        conn.presence_told.pop(user_id, None)
        watchers = self.watchers.get(watched)
        if watchers is None:
            return
        watchers.discard(conn)
        if not watchers:
            del self.watchers[watched]
            await self.directory.unwatch(self.node_id, watched)

    async def notify(self, user: UserKey, *, online: bool) -> None:
        """Tell every node that watches `user` (one batch each) that they came or went."""
        batch: dict[str, Any] = {
            "type": BATCH, "tenant": user[0], "watchers_of": user[1], "online": online,
            "text": presence_frame(user[1], online),
        }
        for node_id in await self.directory.watcher_nodes(user):
            await self.path.send_to_node(node_id, batch, "presence notice")

    async def reconcile(self) -> None:
        """Tell this node's watchers of users who went with a dead node. A node that dies
        announces nothing: its users' directory entries expire after presence_ttl_s, and each
        watching node notices it here, on its heartbeat (a user its watchers were told is
        online is not, or the other way round when a notice was lost). Only with several nodes:
        one process cannot outlive itself."""
        if not self.watchers or await self.directory.live_nodes() is None:
            return
        by_tenant: dict[int, list[str]] = defaultdict(list)
        for tenant_id, user_id in self.watchers:
            by_tenant[tenant_id].append(user_id)
        for tenant_id, user_ids in by_tenant.items():
            for user_id, online in (await self.directory.online(tenant_id, user_ids)).items():
                misinformed = [
                    conn for conn in self.watchers.get((tenant_id, user_id), ())
                    if conn.presence_told.get(user_id, online) != online
                ]
                if misinformed:
                    await self._tell(misinformed, user_id, online)

    async def _tell(self, conns: list[Connection], user_id: str, online: bool) -> None:
        text = presence_frame(user_id, online)
        for conn in conns:
            conn.presence_told[user_id] = online
            try:
                await conn.send_text(text)
                self.counters["presence_reconciled"] += 1
            except Exception:
                logger.warning("presence to connection %s failed", conn.connection_id)
