"""RoomService: this process's rooms: the writers it holds leases for, finding the writer of
any other room, and the node-to-node operations a writer answers.

Any node accepts any ROOM_* frame; when the writer lives elsewhere the request is forwarded
over the channel layer (`ConnectionNode.call`) and answered from there. A node that needs a
room's writer and finds none takes the lease itself, bumps the durable room_epoch and becomes
the writer (§1.2, C-2). Nodes re-report their member counts every second, so a new writer
learns where the room's members are, and a dead node's counts are dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from ulid import ULID

from qim.infra.backends import make_backend
from qim.infra.background import every, spawn
from qim.conf import limit
from qim.gateway.db import in_db_thread
from qim.errors import Refused
from qim.node.connection_node import ConnectionNode, get_node, node_call_handler, node_message_handler
from qim.infra.log_context import unbound
from rooms.leases import LeaseStore, RedisLeaseStore, node_of
from rooms.local import LocalRoom, LocalRooms
from rooms.models import Room
from rooms.ring import RoomRing
from rooms.writer import NOT_WRITER, RoomWriter, TokenBucket

logger = logging.getLogger(__name__)

CALL_TIMEOUT_S = 1.0
REREPORT_S = 3.0
# The node message carrying a writer's batch to a node with members.
ROOM_EVENTS = "room.events"


def room_key(tenant_id: int, room_id: str) -> str:
    return f"{tenant_id}:{room_id}"


def split_key(key: str) -> tuple[int, str]:
    tenant, room_id = key.split(":", 1)
    return int(tenant), room_id


def bump_epoch(tenant_id: int, room_id: str) -> int:
    """room_epoch + 1, durably, in its own transaction: one per new writer."""
    with transaction.atomic():
        room = Room.objects.select_for_update().get(tenant_id=tenant_id, room_id=room_id)
        room.room_epoch += 1
        room.save(update_fields=["room_epoch"])
    return room.room_epoch


class RoomService:
    def __init__(self, node: ConnectionNode, leases: LeaseStore) -> None:
        self.node = node
        self.leases = leases
        self.holder = f"{node.node_id}:{ULID()}"
        self.writers: dict[str, RoomWriter] = {}
        self.local = LocalRooms(node.foreground, node.counters)
        self._locks: dict[str, asyncio.Lock] = {}
        self._started = False
        self._report_seqs = itertools.count(1)
        self._tenures = itertools.count(1)

    @property
    def lease_ttl_s(self) -> float:
        return settings.QIM_ROOM_LEASE_TTL_S

    def ensure_started(self) -> None:
        """Start renewing leases and re-reporting counts, on the first join or writer here:
        a node that only has members must re-report too, or a count lost or overtaken on its
        way stays wrong."""
        if not self._started:
            self._started = True
            with unbound():  # started by the first ROOM_JOIN here, but not that socket's work
                spawn(self._renew_leases(), name="qim-room-leases")
                # Every second: tell each of our rooms' writers how many members we have (a new
                # writer learns it this way), and let our writers forget nodes that died.
                reports = every(1.0, self._report_once, log=logger, failed="reporting room counts failed")
                spawn(reports, name="qim-room-counts")

    # --- finding (or becoming) the writer -------------------------------------------------

    async def writer_node(self, key: str, *, acquire: bool) -> str | None:
        """The node id of the room's writer; with `acquire`, this node when there is none."""
        if key in self.writers and self.writers[key].holds_lease():
            return self.node.node_id
        (holder,) = await self.leases.holders([key])
        if holder is not None and not holder.startswith(f"{self.holder}."):
            return node_of(holder)
        if holder is None and not acquire:
            return None
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key in self.writers and self.writers[key].holds_lease():
                return self.node.node_id
            if await self._renewed(key):
                return self.node.node_id
            started = time.monotonic()
            # One lease value per tenure, not per process: when this process takes a room
            # again (its lease vanished with an emptied Redis), the other nodes see the holder
            # change and report their members to the new writer within a second.
            tenure = f"{self.holder}.{next(self._tenures)}"
            if not await self.leases.acquire(key, tenure, self.lease_ttl_s):
                (holder,) = await self.leases.holders([key])
                return node_of(holder) if holder else None
            await self._become_writer(key, started, tenure)
        return self.node.node_id

    async def _renewed(self, key: str) -> bool:
        """Keep our writer (its epoch and ring) when its lease lapsed by this node's clock only,
        the loop stalled past the renewal (a reconnect storm), and the store still has it ours:
        replays go on instead of every member refetching a new epoch."""
        writer = self.writers.get(key)
        if writer is None:
            return False
        started = time.monotonic()
        if not await self.leases.renew(key, writer.holder, self.lease_ttl_s):
            return False
        writer.lease_valid_until = started + self.lease_ttl_s * 0.9
        self.node.counters["room_leases_renewed_late"] += 1
        return True

    async def _become_writer(self, key: str, lease_started: float, tenure: str) -> None:
        tenant_id, room_id = split_key(key)
        epoch = await in_db_thread(bump_epoch)(tenant_id, room_id)
        self.node.counters["room_epoch_bumps"] += 1
        rate = limit("room_msg_rate")
        self.writers[key] = RoomWriter(
            key=key,
            room_id=room_id,
            tenant_id=tenant_id,
            epoch=epoch,
            ring=RoomRing(epoch, int(limit("room_ring_max_items")), limit("room_log_retention_minutes") * 60),
            bucket=TokenBucket(rate=rate, burst=max(1.0, rate)),
            publish=self.publish,
            holder=tenure,
            lease_valid_until=lease_started + self.lease_ttl_s * 0.9,
            fence=self._fence(key, tenure) if isinstance(self.leases, RedisLeaseStore) else None,
        )
        local = self.local.rooms.get(key)
        if local is not None and local.count:
            # Our own members count at once; other nodes re-report within a second.
            self.writers[key].set_count(self.node.node_id, local.count)
        self.ensure_started()
        logger.info("node %s is the writer of room %s, epoch %s", self.node.node_id, key, epoch)

    def _fence(self, key: str, tenure: str):  # type: ignore[no-untyped-def]
        async def still_holder() -> bool:
            (holder,) = await self.leases.holders([key])
            return holder == tenure

        return still_holder

    async def fenced_writer(self, key: str) -> RoomWriter:
        """The local writer, its lease checked in Redis: for answers that carry events."""
        writer = self.local_writer(key)
        await writer.check_fence()
        return writer

    def local_writer(self, key: str) -> RoomWriter:
        writer = self.writers.get(key)
        if writer is None or not writer.holds_lease():
            raise Refused("conflict", NOT_WRITER)
        return writer

    async def call_writer(self, key: str, op: str, body: dict[str, Any], *, acquire: bool = True) -> dict[str, Any] | None:
        """Run `op` on the room's writer, wherever it is, waiting out a dead writer's lease.

        Answers None when `acquire` is false and the room has no writer.
        """
        deadline = time.monotonic() + self.lease_ttl_s * 2 + 2
        while True:
            node_id = await self.writer_node(key, acquire=acquire)
            if node_id is None:
                return None
            try:
                return await self.node.call(node_id, op, {"key": key, **body}, timeout=CALL_TIMEOUT_S)
            except TimeoutError:
                logger.info("writer %s of room %s did not answer %s", node_id, key, op)
            except Refused as refused:
                if refused.message != NOT_WRITER:
                    raise
            if time.monotonic() > deadline:
                raise Refused("internal", "the room's writer is unavailable; retry", retry_after_ms=1000)
            await asyncio.sleep(0.1)

    # --- delivery ------------------------------------------------------------------------

    async def publish(self, node_id: str, message: dict[str, Any]) -> None:
        """The writer's batch to one node (this one included) on the one node-to-node path.

        A full channel drops the batch (counted, logged): that node's members see the gap in
        room_seq and replay it from the ring."""
        await self.node.send_to_node(node_id, {"type": ROOM_EVENTS, **message}, f"a batch of room {message['room']}")

    # --- background ---------------------------------------------------------------------

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            for key, writer in list(self.writers.items()):
                idle_s = settings.QIM_ROOM_WRITER_IDLE_S
                if idle_s > 0 and writer.idle_for() >= idle_s:
                    await self._retire(key)
                    continue
                started = time.monotonic()
                try:
                    kept = await self.leases.renew(key, writer.holder, self.lease_ttl_s)
                except Exception:
                    logger.exception("renewing the lease of room %s failed", key)
                    continue
                if self.writers.get(key) is not writer:
                    continue  # replaced meanwhile (a new epoch's writer): its lease is not this one
                if kept:
                    writer.lease_valid_until = started + self.lease_ttl_s * 0.9
                else:
                    logger.warning("lost the lease of room %s", key)
                    self.writers.pop(key, None)

    async def _retire(self, key: str) -> None:
        """Give up the lease of an idle room's writer (no members anywhere, nothing in its
        ring): the next node that needs the room becomes its writer, epoch + 1."""
        writer = self.writers.pop(key, None)
        if writer is None:
            return
        try:
            await self.leases.release(key, writer.holder)
        except Exception:
            logger.exception("releasing the lease of idle room %s failed (it expires)", key)
        self.node.counters["room_writers_retired"] += 1
        logger.info("node %s gave up the idle room %s", self.node.node_id, key)

    async def _report_once(self) -> None:
        rooms = [room for room in self.local.rooms.values() if room.count > 0]
        holders = await self.leases.holders([room.key for room in rooms])
        for room, holder in zip(rooms, holders):
            # Also every few seconds regardless: a report lost on its way, or a node dropped
            # by a writer that thought it dead, is heard again.
            stale = time.monotonic() - room.reported_at > REREPORT_S
            if holder is None or holder != room.reported_holder or stale:
                await self.call_writer(room.key, "room.count", self.count_report(room))
                (room.reported_holder,) = await self.leases.holders([room.key])
                room.reported_at = time.monotonic()
        live = await self.node.directory.live_nodes()
        if live is not None:
            live.add(self.node.node_id)
            for writer in self.writers.values():
                # A live node is back in an emptied Redis by its next heartbeat (every third
                # of the TTL): missing for half the TTL more than that, it died.
                writer.drop_nodes(live, grace_s=limit("presence_ttl_s") / 2)

    def count_report(self, room: LocalRoom | None) -> dict[str, Any]:
        """What this node tells a room's writer of its members there: the count now, and the
        report's place among this node's reports (this process's holder, which sorts after
        an earlier process's, then a sequence), so the writer keeps the newest whatever the
        order they arrive in."""
        return {
            "node": self.node.node_id,
            "count": room.count if room is not None else 0,
            "order": [self.holder, next(self._report_seqs)],
        }

    async def report_count(self, key: str) -> None:
        report = self.count_report(self.local.rooms.get(key))
        await self.call_writer(key, "room.count", report, acquire=report["count"] > 0)


_service: RoomService | None = None


def current_room_service() -> RoomService | None:
    """The service if this process made one (metrics read it without making one)."""
    return _service


def get_room_service() -> RoomService:
    global _service
    if _service is None:
        leases: LeaseStore = make_backend("room_leases")  # qim/infra/backends.py: memory or Redis
        _service = RoomService(get_node(), leases)
    return _service


# --- what a writer answers (wherever the request came from) ---------------------------------


@node_call_handler("room.join")
async def answer_join(node: ConnectionNode, body: dict[str, Any]) -> dict[str, Any]:
    writer = await get_room_service().fenced_writer(body["key"])
    # The joining member alone there: its reply covers the events so far (it is live after
    # the reply's latest_room_seq), so the node is not sent them again.
    covered = writer.ring.latest_room_seq if body["count"] == 1 else None
    writer.set_count(body["node"], body["count"], report_order(body), covered=covered)
    return {**writer.replay(body.get("after"), body.get("max_bytes")), "online_count": writer.online_count}


@node_call_handler("room.join_many")
async def answer_joins(node: ConnectionNode, body: dict[str, Any]) -> dict[str, Any]:
    """A burst of one node's joins of the room (rooms/join_batches.py): one fence check and
    one count report for all; each join's own replay. When the joiners are all the node's
    members and every reply reaches the head, the node has the events so far (as answer_join's
    lone member); else the writer's next batch to a newly counted node carries what it missed
    and the joiners drop what their replies already held (LocalRooms.finish_join)."""
    writer = await get_room_service().fenced_writer(body["key"])
    replies = [writer.replay(after, max_bytes) for after, max_bytes in body["joins"]]
    whole = body["count"] == len(replies) and not any(reply["has_more"] for reply in replies)
    covered = writer.ring.latest_room_seq if whole else None
    writer.set_count(body["node"], body["count"], report_order(body), covered=covered)
    return {"replies": replies, "online_count": writer.online_count}


@node_call_handler("room.count")
async def answer_count(node: ConnectionNode, body: dict[str, Any]) -> dict[str, Any]:
    writer = get_room_service().local_writer(body["key"])
    writer.set_count(body["node"], body["count"], report_order(body))
    return {"online_count": writer.online_count}


def report_order(body: dict[str, Any]) -> tuple[str, int] | None:
    order = body.get("order")
    return (str(order[0]), int(order[1])) if order else None


@node_call_handler("room.replay")
async def answer_replay(node: ConnectionNode, body: dict[str, Any]) -> dict[str, Any]:
    return (await get_room_service().fenced_writer(body["key"])).replay(body["after"], body.get("max_bytes"))


@node_call_handler("room.send")
async def answer_send(node: ConnectionNode, body: dict[str, Any]) -> dict[str, Any]:
    writer = get_room_service().local_writer(body["key"])
    return await writer.send(
        sender_id=body["sender_id"], content_type=body["content_type"],
        payload=body["payload"], client_msg_id=body.get("client_msg_id"),
    )


@node_call_handler("room.info")
async def answer_info(node: ConnectionNode, body: dict[str, Any]) -> dict[str, Any]:
    writer = get_room_service().local_writer(body["key"])
    return {**writer.head(), "online_count": writer.online_count, "nodes": sorted(writer.counts)}


@node_call_handler("room.users")
async def answer_users(node: ConnectionNode, body: dict[str, Any]) -> dict[str, Any]:
    """Asked of every node with members (promotion): the user ids connected here."""
    room = get_room_service().local.rooms.get(body["key"])
    users = sorted({c.user_id for c in (room.members | set(room.joining))}) if room else []
    return {"user_ids": users}


@node_message_handler(ROOM_EVENTS)
async def receive_events(node: ConnectionNode, message: dict[str, Any]) -> None:
    get_room_service().local.on_events(message)
