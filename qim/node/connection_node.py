"""The ConnectionNode: this process's sockets, indexed, and the parts it is made of.

Each daphne process is one node with a node id. It keeps in memory which of its connections
belong to which user and composes the rest: the one node-to-node path and its listener on
`qim.node.<node_id>` (node_path.py), node calls (node_calls.py), PRESENCE subscriptions
(presence_watch.py) and fan-out, which writes each batch's text, encoded once by the sender,
to the matching local sockets itself (fanout.py). No per-connection consumer ever handles a
channel-layer message: that path costs a thread hop per message in Channels (§ issue 9).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
from collections import Counter, defaultdict
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from qim.infra import gc_freeze, gc_pauses
from qim.server.tuning import STATE as TUNING
from qim.infra.backends import make_backend
from qim.conf import limit
from qim.node.connection import Connection, UserKey
from qim.node.fanout import FanOut
from qim.node.foreground import ForegroundWork
from qim.node.node_calls import NodeCalls
from qim.node.node_hooks import (
    disconnect_hooks,
    node_call_handler,
    node_message_handler,
    on_disconnect,
    on_node_start,
    on_push_delivered,
    start_hooks,
)
from qim.node.node_path import NODE_CHANNEL_PREFIX, NodePath, node_channel
from qim.node.presence import PresenceDirectory
from qim.node.presence_watch import PresenceWatch
from qim.node.conversation_push import ConversationFanOut, ConversationPush
from qim.node.user_push import UserPush
from qim.infra.log_context import unbound

# Where apps have always imported the registration decorators from.
__all__ = [
    "NODE_CHANNEL_PREFIX", "ConnectionNode", "get_node", "make_directory", "node_call_handler",
    "node_channel", "node_message_handler", "on_disconnect", "on_node_start", "on_push_delivered",
]

logger = logging.getLogger(__name__)

_NODE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ConnectionNode:
    """This process's connections and its end of node-to-node fan-out."""

    def __init__(self, node_id: str, directory: PresenceDirectory) -> None:
        if not _NODE_ID_RE.match(node_id):
            raise ImproperlyConfigured(f"QIM_NODE_ID {node_id!r} must match {_NODE_ID_RE.pattern}")
        self.node_id = node_id
        self.directory = directory
        self.connections: dict[str, Connection] = {}
        self._by_user: dict[UserKey, set[Connection]] = defaultdict(set)
        # Operators and tests read these through GET /api/v1/node.
        self.counters: Counter[str] = Counter()
        # Conversation frames being handled: room ticks give way to them (design C-3).
        self.foreground = ForegroundWork()
        self.path = NodePath(self, self.counters)
        self.calls = NodeCalls(self.path)
        self.presence = PresenceWatch(self.path, directory, self.counters)
        self.fanout = FanOut(self.path, directory, self.counters, self.local_connections_of, self.presence.watchers_of)
        self.conversation_fanout = ConversationFanOut(self)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False

    # --- lifecycle ------------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the channel listener and the heartbeat on the running loop, once.

        Daphne has no lifespan events, so the first connection starts them; a node without
        connections has no recipients and so needs neither.
        """
        if self._started:
            return
        self._started = True
        with unbound():  # the first socket's context is not the node's
            self._tasks.append(asyncio.create_task(self.path.listen(), name="qim-node-listen"))
            self._tasks.append(asyncio.create_task(self._heartbeat(), name="qim-node-heartbeat"))
            for hook in start_hooks():
                self._tasks.append(asyncio.create_task(hook(self), name=f"qim-node-{hook.__name__}"))

    async def _heartbeat(self) -> None:
        period = max(0.2, limit("presence_ttl_s") / 3)
        while True:
            try:
                await self.path.join_groups()
            except Exception:
                logger.exception("joining node groups failed")
            try:
                await self.directory.heartbeat(self.node_id, *self._renewed_entries())
            except Exception:
                logger.exception("presence heartbeat failed")
            try:
                await self.presence.reconcile()
            except Exception:
                logger.exception("presence reconciliation failed")
            await asyncio.sleep(period)

    def _renewed_entries(self) -> tuple[dict[UserKey, set[str]], list[UserKey]]:
        """What the heartbeat renews: nothing for a directory without per-user expiry."""
        if not getattr(self.directory, "renews_entries", True):
            return {}, []
        return self.local_devices(), list(self.presence.watchers)

    # --- the node-to-node path, calls, presence and fan-out (the parts' own modules) -------

    async def send_to_node(self, node_id: str, message: dict[str, Any], what: str) -> bool:
        """See NodePath.send_to_node: every node-to-node message goes this way."""
        return await self.path.send_to_node(node_id, message, what)

    async def call(self, node_id: str, op: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """See NodeCalls.call."""
        return await self.calls.call(node_id, op, body, timeout)

    async def send_to_users(self, push: UserPush) -> int:
        """See FanOut.send_to_users."""
        return await self.fanout.send_to_users(push)

    async def send_to_conversation(self, push: ConversationPush) -> int:
        """See ConversationFanOut.send."""
        return await self.conversation_fanout.send(push)

    async def watch_presence(self, conn: Connection, user_id: str) -> None:
        await self.presence.watch(conn, user_id)

    async def unwatch_presence(self, conn: Connection, user_id: str) -> None:
        await self.presence.unwatch(conn, user_id)

    async def notify_presence(self, user: UserKey, *, online: bool) -> None:
        await self.presence.notify(user, online=online)

    # --- the local index ---------------------------------------------------------------

    async def register(self, conn: Connection) -> None:
        """Index an authenticated connection; announce the user online if this is their first."""
        self.ensure_started()
        self.connections[conn.connection_id] = conn
        local = self._by_user[conn.user_key]
        first_here = not local
        local.add(conn)
        self.counters["connections_opened"] += 1
        elsewhere = (
            await self.directory.nodes_of(conn.tenant_id, [conn.user_id]) if first_here else True
        )
        await self.directory.add(self.node_id, conn.user_key, conn.device_id)
        if not elsewhere:
            await self.notify_presence(conn.user_key, online=True)

    async def unregister(self, conn: Connection) -> None:
        """Drop a connection from every index; idempotent, so the consumer may call it twice."""
        if self.connections.pop(conn.connection_id, None) is None:
            return
        self.counters["connections_closed"] += 1
        for hook in disconnect_hooks():
            try:
                await hook(conn)
            except Exception:
                logger.exception("disconnect hook %s failed", getattr(hook, "__name__", hook))
        for watched in list(conn.presence_watch):
            await self.unwatch_presence(conn, watched)
        local = self._by_user.get(conn.user_key)
        if local is None:
            return
        local.discard(conn)
        device_gone = not any(c.device_id == conn.device_id for c in local)
        if device_gone:
            await self.directory.remove(self.node_id, conn.user_key, conn.device_id, user_gone=not local)
        if local:
            return
        # Another connection of the user may have come or gone during the awaits above.
        if self._by_user.get(conn.user_key) or self._by_user.pop(conn.user_key, None) is None:
            return  # someone else is (or was) the last one out, and announces it
        still_online = await self.directory.online(conn.tenant_id, [conn.user_id])
        if not still_online[conn.user_id]:
            await self.notify_presence(conn.user_key, online=False)

    def local_connections_of(self, user: UserKey) -> set[Connection]:
        return self._by_user.get(user, set())

    def local_connections_of_tenant(self, tenant_id: int) -> list[Connection]:
        return [c for c in self.connections.values() if c.tenant_id == tenant_id]

    def local_devices(self) -> dict[UserKey, set[str]]:
        return {user: {c.device_id for c in conns} for user, conns in self._by_user.items()}

    def stats(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "connections": len(self.connections),
            "online_users": len(self._by_user),
            "counters": dict(self.counters),
            # The collector's thresholds in force (QIM_GC_YOUNG_, _MIDDLE_ and _OLD_THRESHOLD).
            "gc_thresholds": list(gc.get_threshold()),
            # Passes the collector made per generation since start (young, middle, full).
            "gc_collections": [generation["collections"] for generation in gc.get_stats()],
            # And the time those passes took, in milliseconds (qim/infra/gc_pauses.py).
            "gc_pause_ms": gc_pauses.pause_ms(),
            # What the collector has frozen, and its thaws (QIM_GC_FREEZE, qim/infra/gc_freeze.py).
            **gc_freeze.stats(),
            # daphne/autobahn/Twisted internals replaced here, and those left stock with why
            # (QIM_SERVER_TUNING, qim/server/tuning.py).
            "server_tuning": TUNING.as_json(),
        }


_node: ConnectionNode | None = None


def make_directory() -> PresenceDirectory:
    """The presence directory of the family qim/infra/backends.py chose for this process."""
    directory: PresenceDirectory = make_backend("presence")
    return directory


def get_node() -> ConnectionNode:
    """This process's node (one per daphne process)."""
    global _node
    if _node is None:
        _node = ConnectionNode(settings.QIM_NODE_ID, make_directory())
    return _node
