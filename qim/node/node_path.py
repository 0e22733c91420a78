"""The one node-to-node path: `send_to_node` for every kind of message (push batches, room
batches, node calls and their replies), one accounting and one failure policy, and this
node's end of it, the listener on its channel `qim.node.<node_id>`."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer

from qim.node.node_hooks import message_handler, node_groups

logger = logging.getLogger(__name__)

NODE_CHANNEL_PREFIX = "qim.node."


def node_channel(node_id: str) -> str:
    return NODE_CHANNEL_PREFIX + node_id


class NodePath:
    """Carries a message of any registered type (`node_message_handler`) to one node.

    To this node it runs the type's handler in process, with no channel layer, so no caller
    needs a branch of its own for "the node is me". To another node it is one channel-layer
    message, best effort: a full channel (channels-redis' ChannelFull) is counted and logged
    and the caller learns False. What was dropped heals on the receiving side: SYNC for the
    mailbox, ROOM_REPLAY for a room (a gap in room_seq), the ring timeout for a call's
    signals, the caller's timeout for a node call."""

    def __init__(self, node: Any, counters: Counter[str]) -> None:
        # `node` is the ConnectionNode, handed to each handler as its first argument.
        self.node = node
        self.node_id: str = node.node_id
        self.counters = counters

    async def send_to_node(self, node_id: str, message: dict[str, Any], what: str) -> bool:
        """Deliver `message` (its "type" names the handler) to node `node_id`; False when
        that node's channel was full and the message was dropped."""
        if node_id == self.node_id:
            self.counters["node_messages_local"] += 1
            await self.dispatch(message)
            return True
        self.counters["layer_messages_sent"] += 1
        try:
            await get_channel_layer().send(node_channel(node_id), message)
        except ChannelFull:
            self.counters["layer_messages_dropped"] += 1
            logger.warning("node channel of %s is full: %s dropped", node_id, what)
            return False
        return True

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Run the handler registered for the message's type; its failure is logged here,
        whichever node the message came from."""
        kind = message.get("type", "")
        handler = message_handler(kind)
        if handler is None:
            logger.warning("a node message of unknown type %r was ignored", kind)
            return
        try:
            await handler(self.node, message)
        except Exception:
            logger.exception("handling a node message of type %s failed", kind)

    async def listen(self) -> None:
        """Read this node's channel for as long as the node runs."""
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
            await self.dispatch(message)

    async def join_groups(self) -> None:
        """Put this node's channel in every registered group (re-joined every heartbeat:
        channels-redis forgets group members after group_expiry)."""
        layer = get_channel_layer()
        for group in node_groups():
            await layer.group_add(group, node_channel(self.node_id))
