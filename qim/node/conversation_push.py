"""Live delivery to a large group's members without naming them (design §4.3, issue #34).

A message to a group whose members are mostly `mention_only` writes mailbox entries for a
few and must still reach every member's online devices. Naming 100 000 members in a
UserPush would make every SEND look each of them up in the presence directory. Instead the
push names the conversation: one batch goes to every live node, encoded once, as rooms do;
each node keeps the conversation's current member ids (read once, and again only when the
push's `members_version` says membership changed, so a removed member is never written to)
and writes the frame to its own sockets of those members, less the ones the push excludes
(they have a mailbox entry of the same row and get it as a mailbox EVENT).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from qim.infra.instruments import fanout_done
from qim.models import MembershipInterval
from qim.node.node_hooks import node_message_handler
from qim.node.outbound import TextFrame

logger = logging.getLogger(__name__)

CONVERSATION_BATCH = "node.conversation_batch"
# How many conversations' member sets a node keeps (the busiest large groups).
CACHED_CONVERSATIONS = 64
# How long the list of live nodes is trusted (one directory read per second at most).
LIVE_NODES_TTL_S = 1.0


@dataclass
class ConversationPush:
    """One frame for every current member of a conversation but `exclude` (user ids)."""

    tenant_id: int
    conversation_id: str
    members_version: int
    text: str
    exclude: list[str] = field(default_factory=list)
    committed_at: float | None = None

    def batch(self) -> dict[str, Any]:
        return {
            "type": CONVERSATION_BATCH, "tenant": self.tenant_id, "conversation": self.conversation_id,
            "version": self.members_version, "text": self.text, "exclude": self.exclude,
            "committed_at": self.committed_at,
        }


def _member_ids(conversation_id: str) -> frozenset[str]:
    return frozenset(
        MembershipInterval.objects.filter(conversation_id=conversation_id, left_at__isnull=True)
        .values_list("user__username", flat=True)
    )


class MemberSets:
    """This node's copies of large groups' current member ids, each with the members_version
    it was read at; a push with another version reads the set again (one read per change,
    shared by the pushes that wait for it)."""

    def __init__(self) -> None:
        self._sets: OrderedDict[str, tuple[int, frozenset[str]]] = OrderedDict()
        self._loading: dict[tuple[str, int], asyncio.Future[frozenset[str]]] = {}

    async def members(self, conversation_id: str, version: int) -> frozenset[str]:
        held = self._sets.get(conversation_id)
        if held is not None and held[0] == version:
            self._sets.move_to_end(conversation_id)
            return held[1]
        key = (conversation_id, version)
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(sync_to_async(_member_ids, thread_sensitive=False)(conversation_id))
            self._loading[key] = pending
            try:
                members = await pending
            finally:
                self._loading.pop(key, None)
            held = self._sets.get(conversation_id)
            if held is None or held[0] <= version:
                self._sets[conversation_id] = (version, members)
                self._sets.move_to_end(conversation_id)
                while len(self._sets) > CACHED_CONVERSATIONS:
                    self._sets.popitem(last=False)
            return members
        return await pending


class ConversationFanOut:
    """The sending and receiving ends of conversation pushes on this node."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.member_sets = MemberSets()
        self._live_nodes: tuple[float, set[str]] | None = None

    async def _nodes(self) -> set[str]:
        now = time.monotonic()
        if self._live_nodes is None or now - self._live_nodes[0] > LIVE_NODES_TTL_S:
            live = await self.node.directory.live_nodes()
            self._live_nodes = (now, set(live) if live is not None else {self.node.node_id})
        return self._live_nodes[1] | {self.node.node_id}

    async def send(self, push: ConversationPush) -> int:
        """One batch to every live node (best effort: HISTORY and the list heal a lost one)."""
        nodes = await self._nodes()
        batch = push.batch()
        for node_id in sorted(nodes):
            await self.node.send_to_node(node_id, batch, "conversation batch")
        return len(nodes)

    async def write(self, batch: dict[str, Any]) -> int:
        """Write a batch to this node's sockets of the conversation's members; answers how many."""
        local = self.node.local_connections_of_tenant(batch["tenant"])
        if not local:
            return 0
        members = await self.member_sets.members(batch["conversation"], batch["version"])
        exclude = set(batch.get("exclude") or ())
        frame = TextFrame.of(batch["text"])  # encoded and framed once for every socket
        written = 0
        for conn in local:
            if conn.user_id in members and conn.user_id not in exclude:
                try:
                    await conn.send_text(frame)
                    written += 1
                except Exception:
                    logger.exception("writing to connection %s failed", conn.connection_id)
        self.node.counters["frames_written"] += written
        self.node.counters["conversation_batches"] += 1
        fanout_done(batch.get("committed_at"))
        return written


@node_message_handler(CONVERSATION_BATCH)
async def on_conversation_batch(node: Any, message: dict[str, Any]) -> None:
    await node.conversation_fanout.write(message)
