"""The ConnectionNode: this process's sockets, indexed, and the one channel it is reached by.

Each daphne process is one node with a node id. It keeps in memory which of its connections
belong to which user (and, for presence, who watches whom), listens on one channel-layer
channel `qim.node.<node_id>` for per-node batches, and writes each batch's text, encoded once
by the sender, to the matching local sockets itself. No per-connection consumer ever handles a
channel-layer message: that path costs a thread hop per message in Channels (§ issue 9).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from qim.backends import make_backend
from qim.background import spawn
from qim.conf import limit
from qim.errors import Refused
from qim.gateway.codec import encode
from qim.gateway.connection import Connection, UserKey
from qim.gateway.foreground import ForegroundWork
from qim.gateway.presence import PresenceDirectory

if TYPE_CHECKING:
    from qim.gateway.user_push import UserPush

logger = logging.getLogger(__name__)

NODE_CHANNEL_PREFIX = "qim.node."
_NODE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def node_channel(node_id: str) -> str:
    return NODE_CHANNEL_PREFIX + node_id


NodeMessageHandler = Callable[["ConnectionNode", dict[str, Any]], Awaitable[None]]
# Channel-layer message type -> handler, for messages other than per-node batches; apps
# register theirs (the registry's "registry.changed") with `node_message_handler`.
_message_handlers: dict[str, NodeMessageHandler] = {}
# Channel-layer groups every node's channel joins, so one group_send reaches all nodes.
_node_groups: set[str] = set()


NodeCallHandler = Callable[["ConnectionNode", dict[str, Any]], Awaitable[dict[str, Any]]]
# Requests one node makes of another (`ConnectionNode.call`), by operation name.
_call_handlers: dict[str, NodeCallHandler] = {}
DisconnectHook = Callable[[Connection], Awaitable[None]]
_disconnect_hooks: list[DisconnectHook] = []
StartHook = Callable[["ConnectionNode"], Awaitable[None]]
# Run as tasks of their own when the node starts (the credentials re-check loop).
_start_hooks: list[StartHook] = []


def on_node_start(hook: StartHook) -> StartHook:
    """Run `hook(node)` as a task of its own once the node starts (its first connection)."""
    _start_hooks.append(hook)
    return hook


def node_call_handler(op: str):  # type: ignore[no-untyped-def]
    """Register the handler answering `ConnectionNode.call(node, op, body)` on every node."""

    def register(handler: NodeCallHandler) -> NodeCallHandler:
        _call_handlers[op] = handler
        return handler

    return register


def on_disconnect(hook: DisconnectHook) -> DisconnectHook:
    """Run `hook(conn)` whenever a connection leaves the index (close, crash or kill)."""
    _disconnect_hooks.append(hook)
    return hook


def node_message_handler(message_type: str, *, group: str | None = None):  # type: ignore[no-untyped-def]
    """Register a handler for `message_type`; with `group`, every node joins that group."""

    def register(handler: NodeMessageHandler) -> NodeMessageHandler:
        _message_handlers[message_type] = handler
        if group is not None:
            _node_groups.add(group)
        return handler

    return register


def _presence_frame(user_id: str, online: bool) -> str:
    return encode({"type": "PRESENCE", "user_id": user_id, "online": online})


class ConnectionNode:
    """This process's connections and its end of node-to-node fan-out."""

    def __init__(self, node_id: str, directory: PresenceDirectory) -> None:
        if not _NODE_ID_RE.match(node_id):
            raise ImproperlyConfigured(f"QIM_NODE_ID {node_id!r} must match {_NODE_ID_RE.pattern}")
        self.node_id = node_id
        self.directory = directory
        self.connections: dict[str, Connection] = {}
        self._by_user: dict[UserKey, set[Connection]] = defaultdict(set)
        self._watchers: dict[UserKey, set[Connection]] = defaultdict(set)
        # Operators and tests read these through GET /api/v1/node.
        self.counters: Counter[str] = Counter()
        # Conversation frames being handled: room ticks give way to them (design C-3).
        self.foreground = ForegroundWork()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._calls: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._call_serial = 0

    # --- lifecycle ------------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the channel listener and the heartbeat on the running loop, once.

        Daphne has no lifespan events, so the first connection starts them; a node without
        connections has no recipients and so needs neither.
        """
        if self._started:
            return
        self._started = True
        self._tasks.append(asyncio.create_task(self._listen(), name="qim-node-listen"))
        self._tasks.append(asyncio.create_task(self._heartbeat(), name="qim-node-heartbeat"))
        for hook in _start_hooks:
            self._tasks.append(asyncio.create_task(hook(self), name=f"qim-node-{hook.__name__}"))

    async def _listen(self) -> None:
        layer = get_channel_layer()
        channel = node_channel(self.node_id)
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("node channel receive failed; retrying")
                await asyncio.sleep(0.5)
                continue
            self.counters["layer_messages_received"] += 1
            kind = message.get("type", "")
            if kind == "node.call":
                # Answered in a task of its own: a slow request never stalls the listener.
                spawn(self._answer_call(message), name="qim-node-call")
                continue
            if kind == "node.reply":
                future = self._calls.pop(message["call_id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
                continue
            try:
                handler = _message_handlers.get(kind)
                if handler is not None:
                    await handler(self, message)
                else:
                    await self.deliver_local(message)
            except Exception:
                logger.exception("handling a node message of type %s failed", message.get("type"))

    # --- requests between nodes --------------------------------------------------------

    async def call(self, node_id: str, op: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Ask node `node_id` to run `op`; answers its result or re-raises its Refused.

        Raises TimeoutError when the node does not answer in time (it may be dead).
        """
        handler = _call_handlers[op]
        if node_id == self.node_id:
            return await handler(self, body)
        self.ensure_started()
        self._call_serial += 1
        call_id = f"{self.node_id}:{self._call_serial}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        message = {"type": "node.call", "op": op, "body": body, "reply_to": self.node_id, "call_id": call_id}
        try:
            if not await self.layer_send(node_id, message, "node call"):
                raise TimeoutError(f"node {node_id}'s channel is full")  # as if it did not answer
            reply = await asyncio.wait_for(future, timeout)
        finally:
            self._calls.pop(call_id, None)
        if "error" in reply:
            error = reply["error"]
            raise Refused(error["code"], error["message"], retry_after_ms=error.get("retry_after_ms"))
        return reply["result"]

    async def _answer_call(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"type": "node.reply", "call_id": message["call_id"]}
        try:
            reply["result"] = await _call_handlers[message["op"]](self, message["body"])
        except Refused as refused:
            reply["error"] = {"code": refused.code, "message": refused.message, "retry_after_ms": refused.retry_after_ms}
        except Exception:
            logger.exception("node call %s failed", message.get("op"))
            reply["error"] = {"code": "internal", "message": f"{message.get('op')} failed on {self.node_id}"}
        await self.layer_send(message["reply_to"], reply, "node call reply")

    async def layer_send(self, node_id: str, message: dict[str, Any], what: str) -> bool:
        """One channel-layer message to another node; False when its channel was full.

        channels-redis refuses a message to a full channel (ChannelFull) and nothing else tells
        anyone: every drop is counted (`layer_messages_dropped`) and logged here. What was
        dropped heals on the receiving side: SYNC for the mailbox, ROOM_REPLAY for a room
        (the member sees a gap in room_seq), the caller's timeout for a call."""
        self.counters["layer_messages_sent"] += 1
        try:
            await get_channel_layer().send(node_channel(node_id), message)
        except ChannelFull:
            self.counters["layer_messages_dropped"] += 1
            logger.warning("node channel of %s is full: %s dropped", node_id, what)
            return False
        return True

    async def _join_groups(self) -> None:
        layer = get_channel_layer()
        for group in sorted(_node_groups):
            await layer.group_add(group, node_channel(self.node_id))

    async def _heartbeat(self) -> None:
        period = max(0.2, limit("presence_ttl_s") / 3)
        while True:
            try:
                # Re-joined every beat: channels-redis forgets group members after group_expiry.
                await self._join_groups()
            except Exception:
                logger.exception("joining node groups failed")
            try:
                await self.directory.heartbeat(self.node_id, self.local_devices(), list(self._watchers))
            except Exception:
                logger.exception("presence heartbeat failed")
            try:
                await self._reconcile_presence()
            except Exception:
                logger.exception("presence reconciliation failed")
            await asyncio.sleep(period)

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
        for hook in _disconnect_hooks:
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

    # --- presence subscriptions ------------------------------------------------------------

    async def watch_presence(self, conn: Connection, user_id: str) -> None:
        watched = (conn.tenant_id, user_id)
        conn.presence_watch.add(user_id)
        watchers = self._watchers[watched]
        if not watchers:
            await self.directory.watch(self.node_id, watched)
        watchers.add(conn)

    async def unwatch_presence(self, conn: Connection, user_id: str) -> None:
        watched = (conn.tenant_id, user_id)
        conn.presence_watch.discard(user_id)
        conn.presence_told.pop(user_id, None)
        watchers = self._watchers.get(watched)
        if watchers is None:
            return
        watchers.discard(conn)
        if not watchers:
            del self._watchers[watched]
            await self.directory.unwatch(self.node_id, watched)

    async def notify_presence(self, user: UserKey, *, online: bool) -> None:
        """Tell every node that watches `user` (one batch each) that they came or went."""
        text = _presence_frame(user[1], online)
        for node_id in await self.directory.watcher_nodes(user):
            await self.send_batch(
                node_id, {"tenant": user[0], "watchers_of": user[1], "online": online, "text": text}
            )

    async def _reconcile_presence(self) -> None:
        """Tell this node's watchers of users who went with a dead node. A node that dies
        announces nothing: its users' directory entries expire after presence_ttl_s, and each
        watching node notices it here, on its heartbeat (a user its watchers were told is
        online is not, or the other way round when a notice was lost). Only with several nodes:
        one process cannot outlive itself."""
        if not self._watchers or await self.directory.live_nodes() is None:
            return
        by_tenant: dict[int, list[str]] = defaultdict(list)
        for tenant_id, user_id in self._watchers:
            by_tenant[tenant_id].append(user_id)
        for tenant_id, user_ids in by_tenant.items():
            for user_id, online in (await self.directory.online(tenant_id, user_ids)).items():
                misinformed = [
                    conn for conn in self._watchers.get((tenant_id, user_id), ())
                    if conn.presence_told.get(user_id, online) != online
                ]
                if not misinformed:
                    continue
                text = _presence_frame(user_id, online)
                for conn in misinformed:
                    conn.presence_told[user_id] = online
                    try:
                        await conn.send_text(text)
                        self.counters["presence_reconciled"] += 1
                    except Exception:
                        logger.warning("presence to connection %s failed", conn.connection_id)

    # --- fan-out -------------------------------------------------------------------

    async def send_to_users(self, push: "UserPush") -> int:
        """Deliver a push to every connection of its users, one batch per node that has any.

        Answers how many nodes were sent a batch; nodes without recipients get nothing.
        """
        grouped = await self.directory.nodes_of(push.tenant_id, push.user_ids)
        for node_id, users in grouped.items():
            batch: dict[str, Any] = {"tenant": push.tenant_id, "users": users}
            if push.text is not None:
                batch["text"] = push.text
            else:
                batch["head"], batch["tail"] = push.head, push.tail
                batch["per_user"] = {u: push.per_user[u] for u in users}
            if push.exclude_device is not None:
                batch["exclude"] = list(push.exclude_device)
            await self.send_batch(node_id, batch)
        return len(grouped)

    async def send_batch(self, node_id: str, batch: dict[str, Any]) -> None:
        """One batch to one node: written straight to local sockets when it is this node."""
        batch = {"type": "node.batch", **batch}
        if node_id == self.node_id:
            await self.deliver_local(batch)
            return
        # Pushes are best effort; persistent data heals through SYNC.
        await self.layer_send(node_id, batch, "push batch")

    def _targets(self, batch: dict[str, Any]) -> Iterable[Connection]:
        tenant_id = batch["tenant"]
        if "watchers_of" in batch:
            return list(self._watchers.get((tenant_id, batch["watchers_of"]), ()))
        exclude = tuple(batch["exclude"]) if batch.get("exclude") else None
        targets = []
        for user_id in batch.get("users", ()):
            for conn in self._by_user.get((tenant_id, user_id), ()):
                if exclude is None or (conn.user_id, conn.device_id) != exclude:
                    targets.append(conn)
        return targets

    async def deliver_local(self, batch: dict[str, Any]) -> None:
        """Write a batch's text (the same string for all, or head + per-user part + tail) to
        each local target socket."""
        text = batch.get("text")
        per_user = batch.get("per_user")
        # A presence notice: remember what each watcher was told (_reconcile_presence).
        told = (batch["watchers_of"], batch["online"]) if "online" in batch else None
        for conn in self._targets(batch):
            if told is not None:
                conn.presence_told[told[0]] = told[1]
            if text is None:
                frame = batch["head"] + per_user[conn.user_id] + batch["tail"]
            else:
                frame = text
            try:
                await conn.send_text(frame)
                self.counters["frames_written"] += 1
            except Exception:
                logger.exception("writing to connection %s failed", conn.connection_id)

    def stats(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "connections": len(self.connections),
            "online_users": len(self._by_user),
            "counters": dict(self.counters),
        }


_node: ConnectionNode | None = None


def make_directory() -> PresenceDirectory:
    """The presence directory of the family qim/backends.py chose for this process."""
    directory: PresenceDirectory = make_backend("presence")
    return directory


def get_node() -> ConnectionNode:
    """This process's node (one per daphne process)."""
    global _node
    if _node is None:
        _node = ConnectionNode(settings.QIM_NODE_ID, make_directory())
    return _node
