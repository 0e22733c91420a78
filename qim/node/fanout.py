"""Fan-out: a UserPush becomes one batch per node that holds any of its recipients, and each
node writes its batch, encoded once by the sender, to the matching local sockets."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from qim.node.connection import Connection, UserKey
from qim.node.node_hooks import node_message_handler, push_delivered_hooks
from qim.node.node_path import NodePath
from qim.node.presence import PresenceDirectory
from qim.node.outbound import TextFrame
from qim.node.user_push import UserPush
from qim.infra.instruments import fanout_done

logger = logging.getLogger(__name__)

# The node message carrying a push (or a PRESENCE notice) to one node's sockets.
BATCH = "node.batch"

ConnectionsOf = Callable[[UserKey], Iterable[Connection]]


def batch_of(push: UserPush, users: list[str]) -> dict[str, Any]:
    """The part of `push` for one node, whose local recipients are `users`."""
    batch: dict[str, Any] = {"type": BATCH, "tenant": push.tenant_id, "users": users}
    if push.text is not None:
        batch["text"] = push.text
    else:
        batch["head"], batch["tail"] = push.head, push.tail
        batch["per_user"] = {u: push.per_user[u] for u in users}
    if push.exclude_device is not None:
        batch["exclude"] = list(push.exclude_device)
    if push.only_device is not None:
        batch["only"] = list(push.only_device)
    if push.kind is not None:
        batch["kind"] = push.kind
    if push.committed_at is not None:
        batch["committed_at"] = push.committed_at
    return batch


class FanOut:
    """This node's sending and receiving ends of user pushes."""

    def __init__(
        self, path: NodePath, directory: PresenceDirectory, counters: Counter[str],
        connections_of: ConnectionsOf, watchers_of: ConnectionsOf,
    ) -> None:
        self.path = path
        self.directory = directory
        self.counters = counters
        self._connections_of = connections_of
        self._watchers_of = watchers_of

    async def send_to_users(self, push: UserPush) -> int:
        """Deliver a push to every connection of its users, one batch per node that has any.

        Answers how many nodes were sent a batch; nodes without recipients get nothing.
        """
        grouped = await self.directory.nodes_of(push.tenant_id, push.user_ids)
        for node_id, users in grouped.items():
            # Pushes are best effort; persistent data heals through SYNC.
            await self.path.send_to_node(node_id, batch_of(push, users), "push batch")
        return len(grouped)

    def _targets(self, batch: dict[str, Any]) -> list[Connection]:
        tenant_id = batch["tenant"]
        if "watchers_of" in batch:
            return list(self._watchers_of((tenant_id, batch["watchers_of"])))
        exclude = tuple(batch["exclude"]) if batch.get("exclude") else None
        only = tuple(batch["only"]) if batch.get("only") else None
        targets = []
        for user_id in batch.get("users", ()):
            for conn in self._connections_of((tenant_id, user_id)):
                device = (conn.user_id, conn.device_id)
                if device != exclude and (only is None or device == only):
                    targets.append(conn)
        return targets

    async def write_batch(self, batch: dict[str, Any]) -> None:
        """Write a batch's text (the same string for all, or head + per-user part + tail) to
        each local target socket."""
        text = batch.get("text")
        if text is not None:  # the same frame for everyone: encoded and framed once
            text = TextFrame.of(text)
        per_user = batch.get("per_user")
        # A presence notice: remember what each watcher was told (PresenceWatch.reconcile).
        told = (batch["watchers_of"], batch["online"]) if "online" in batch else None
        for conn in self._targets(batch):
            if told is not None:
                conn.presence_told[told[0]] = told[1]
            frame = batch["head"] + per_user[conn.user_id] + batch["tail"] if text is None else text
            try:
                await conn.send_text(frame)
                self.counters["frames_written"] += 1
            except Exception:
                logger.exception("writing to connection %s failed", conn.connection_id)
        fanout_done(batch.get("committed_at"))

    async def after_delivery(self, batch: dict[str, Any]) -> None:
        for hook in push_delivered_hooks(batch.get("kind") or ""):
            try:
                await hook(self.path.node)
            except Exception:
                logger.exception("push hook %s failed", getattr(hook, "__name__", hook))


@node_message_handler(BATCH)
async def on_batch(node: Any, message: dict[str, Any]) -> None:
    await node.fanout.write_batch(message)
    if "kind" in message:
        await node.fanout.after_delivery(message)
