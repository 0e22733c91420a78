"""What apps register on every node: handlers for node messages and node calls, and hooks run
when a socket leaves or the node starts. A module of its own so that the node's parts and the
apps all import it and it imports none of them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from qim.node.connection import Connection

# The first argument of every handler and start hook is the ConnectionNode; typed Any because
# qim/node/connection_node.py imports this module, not the other way round.
NodeMessageHandler = Callable[[Any, dict[str, Any]], Awaitable[None]]
NodeCallHandler = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]
DisconnectHook = Callable[[Connection], Awaitable[None]]
StartHook = Callable[[Any], Awaitable[None]]
PushDeliveredHook = Callable[[Any], Awaitable[None]]

# Channel-layer message type -> handler: the node's own kinds (a push batch, a call, its
# reply) and the apps' (rooms' "room.events", the registry's "registry.changed").
_message_handlers: dict[str, NodeMessageHandler] = {}
# Channel-layer groups every node's channel joins, so one group_send reaches all nodes.
_node_groups: set[str] = set()
# Requests one node makes of another (`ConnectionNode.call`), by operation name.
_call_handlers: dict[str, NodeCallHandler] = {}
_disconnect_hooks: list[DisconnectHook] = []
# Run as tasks of their own when the node starts (the credentials re-check loop).
_start_hooks: list[StartHook] = []
# UserPush.kind -> hooks run on each node a push of that kind reaches (RTC_SIGNAL: the node
# starts its call sweeps).
_push_delivered_hooks: dict[str, list[PushDeliveredHook]] = {}


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


def on_push_delivered(kind: str):  # type: ignore[no-untyped-def]
    """Run `hook(node)` on every node a push of `kind` (UserPush.kind) reaches, after its
    frames were written there, this node included."""

    def register(hook: PushDeliveredHook) -> PushDeliveredHook:
        _push_delivered_hooks.setdefault(kind, []).append(hook)
        return hook

    return register


def message_handler(message_type: str) -> NodeMessageHandler | None:
    return _message_handlers.get(message_type)


def call_handler(op: str) -> NodeCallHandler:
    return _call_handlers[op]


def has_call_handler(op: Any) -> bool:
    return op in _call_handlers


def node_groups() -> list[str]:
    return sorted(_node_groups)


def disconnect_hooks() -> list[DisconnectHook]:
    return list(_disconnect_hooks)


def start_hooks() -> list[StartHook]:
    return list(_start_hooks)


def push_delivered_hooks(kind: str) -> list[PushDeliveredHook]:
    return list(_push_delivered_hooks.get(kind, ()))
