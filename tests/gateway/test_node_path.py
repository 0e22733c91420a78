"""The one node-to-node path (qim/node/node_path.py), in process on Channels' real
in-memory layer: every kind of message (a push batch, an RTC_SIGNAL push, a room batch, a
node call) meets a full channel the same way, counted once as sent and once as dropped and
answered False, and a message to this node runs its handler with no channel layer at all,
device-level targeting (UserPush.only_device / exclude_device) included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.layers import get_channel_layer

from qim.node.connection import Connection
from qim.node.connection_node import ConnectionNode, get_node, node_channel, on_push_delivered
from qim.node.user_push import UserPush
from rooms.leases import MemoryLeaseStore
from rooms.service import RoomService
from rtc.relay import deliver_to_devices

TENANT = 7
FULL = "np-full"  # a peer node that reads nothing: its channel holds one message
HOOK_KIND = "test.node-path"
hook_runs: list[str] = []


@on_push_delivered(HOOK_KIND)
async def record_delivery(node: ConnectionNode) -> None:
    hook_runs.append(node.node_id)


@pytest.fixture
def small_layer(settings) -> None:  # type: ignore[no-untyped-def]
    # Changing the setting makes Channels build a fresh layer (its setting_changed receiver).
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1}}}
    # The node starts once a socket registers; its credentials re-check reads the database.
    settings.QIM_TOKEN_RECHECK_S = 0


@pytest.fixture
async def node(small_layer: None) -> AsyncIterator[ConnectionNode]:
    """This process's node (RTC delivery finds it with get_node()), its channel emptied and
    its listener and heartbeat, once a test starts them, cancelled after."""
    node = get_node()
    yield node
    for task in node._tasks:
        task.cancel()
    await asyncio.gather(*node._tasks, return_exceptions=True)
    node._tasks.clear()
    node._started = False
    for conn in list(node.connections.values()):
        await node.unregister(conn)


def connection(user_id: str, device_id: str, inbox: list[tuple[str, str, str]]) -> Connection:
    async def send_text(text: Any) -> None:
        # A push written to many sockets arrives framed once (a TextFrame); keep its text.
        inbox.append((user_id, device_id, getattr(text, "text", text)))

    return Connection(
        connection_id=f"{user_id}-{device_id}", tenant_id=TENANT, tenant_name="np", user_pk=0,
        user_id=user_id, device_id=device_id, is_tenant_admin=False, client_version="test", send_text=send_text,
    )


def counts(node: ConnectionNode) -> tuple[int, int, int]:
    c = node.counters
    return c["layer_messages_sent"], c["layer_messages_dropped"], c["node_messages_local"]


async def test_a_full_channel_is_counted_once_whatever_the_kind_of_message(node: ConnectionNode) -> None:
    await get_channel_layer().send(node_channel(FULL), {"type": "node.batch", "tenant": TENANT, "users": []})
    await node.directory.add(FULL, (TENANT, "bob"), "phone")
    try:
        rooms = RoomService(node, MemoryLeaseStore())
        room_batch = {"room": f"{TENANT}:lobby", "tenant": TENANT, "room_id": "lobby", "room_epoch": 1, "events": []}
        kinds = {
            "push batch": lambda: node.send_to_users(UserPush(tenant_id=TENANT, user_ids=["bob"], text="{}")),
            "RTC_SIGNAL": lambda: deliver_to_devices(TENANT, "bob", "{}", only="phone"),
            "room batch": lambda: rooms.publish(FULL, room_batch),
            "any node message": lambda: node.send_to_node(FULL, {"type": "node.batch", "tenant": TENANT, "users": []}, "x"),
        }
        for kind, send in kinds.items():
            before = counts(node)
            await send()
            sent, dropped, local = counts(node)
            assert (sent - before[0], dropped - before[1], local - before[2]) == (1, 1, 0), kind
        assert await node.send_to_node(FULL, {"type": "node.batch"}, "a test message") is False
        before = counts(node)
        with pytest.raises(TimeoutError, match="channel is full"):
            await node.call(FULL, "room.info", {"key": "x"}, timeout=60)
        assert tuple(a - b for a, b in zip(counts(node), before)) == (1, 1, 0)
    finally:
        await node.directory.remove(FULL, (TENANT, "bob"), "phone", user_gone=True)
        await get_channel_layer().receive(node_channel(FULL))


async def test_a_message_to_this_node_runs_its_handler_in_process(node: ConnectionNode) -> None:
    inbox: list[tuple[str, str, str]] = []
    for user_id, device_id in (("alice", "phone"), ("alice", "laptop"), ("bob", "phone")):
        await node.register(connection(user_id, device_id, inbox))
    before, written = counts(node), node.counters["frames_written"]

    assert await node.send_to_users(UserPush(TENANT, ["alice", "bob"], text="only", only_device=("alice", "phone"))) == 1
    assert await node.send_to_users(UserPush(TENANT, ["alice", "bob"], text="but", exclude_device=("alice", "phone"))) == 1
    assert await node.send_to_users(UserPush(TENANT, ["bob"], text="hooked", kind=HOOK_KIND)) == 1
    # (RTC's own deliver_to_devices is not called here: its push would start this process's
    # call sweeps on a loop that ends with the test.)
    assert await node.send_to_users(UserPush(TENANT, ["alice"], text="signal", exclude_device=("alice", "laptop"))) == 1

    assert sorted(inbox) == sorted([
        ("alice", "phone", "only"), ("alice", "laptop", "but"), ("bob", "phone", "but"),
        ("bob", "phone", "hooked"), ("alice", "phone", "signal"),
    ])
    assert hook_runs == [node.node_id]
    # Four batches, all to this node: none went through the channel layer.
    assert tuple(a - b for a, b in zip(counts(node), before)) == (0, 0, 4)
    assert node.counters["frames_written"] - written == 5
    assert await deliver_to_devices(TENANT, "alice", "nobody", only="tablet") == 0
    assert len(inbox) == 5
