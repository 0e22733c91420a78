"""Requests one node makes of another (`ConnectionNode.call`) and their answers, carried as
two node messages ("node.call", "node.reply") on the one node-to-node path."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.conf import settings

from qim.infra.background import spawn
from qim.errors import Refused
from qim.node.node_hooks import call_handler, has_call_handler, node_message_handler
from qim.node.node_path import NodePath

logger = logging.getLogger(__name__)

CALL = "node.call"
REPLY = "node.reply"
# The error code of a call whose op the answering node does not run (older nodes answered
# such a call `internal`, "<op> failed on <node>", after logging a KeyError).
UNKNOWN_OP = "unknown_op"


def runs(op: Any) -> bool:
    """Whether this node answers `op`: it has the handler and QIM_NODE_CALL_OPS_OFF leaves
    it on (the same answer for a call from this node and from another)."""
    return has_call_handler(op) and op not in settings.QIM_NODE_CALL_OPS_OFF


class NodeCalls:
    """This node's calls waiting for an answer, and its answers to other nodes' calls."""

    def __init__(self, path: NodePath) -> None:
        self.path = path
        self._calls: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._call_serial = 0

    async def call(self, node_id: str, op: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Ask node `node_id` to run `op`; answers its result or re-raises its Refused.

        Raises TimeoutError when the node does not answer in time (it may be dead). A call to
        this node runs the handler directly: there is no message to send, nothing to wait for.
        """
        if node_id == self.path.node_id:
            if not runs(op):
                raise Refused(UNKNOWN_OP, f"{op} is unknown on {node_id}")
            return await call_handler(op)(self.path.node, body)
        self.path.node.ensure_started()  # the listener must run for the reply to arrive
        self._call_serial += 1
        call_id = f"{self.path.node_id}:{self._call_serial}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        message = {"type": CALL, "op": op, "body": body, "reply_to": self.path.node_id, "call_id": call_id}
        try:
            if not await self.path.send_to_node(node_id, message, "node call"):
                raise TimeoutError(f"node {node_id}'s channel is full")  # as if it did not answer
            reply = await asyncio.wait_for(future, timeout)
        finally:
            self._calls.pop(call_id, None)
        if "error" in reply:
            error = reply["error"]
            raise Refused(error["code"], error["message"], retry_after_ms=error.get("retry_after_ms"))
        return reply["result"]

    async def answer(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"type": REPLY, "call_id": message["call_id"]}
        op = message.get("op")
        if not runs(op):
            # A caller of a newer release during a rolling upgrade (or an op switched off):
            # said so exactly, so it can fall back; nothing failed here.
            self.path.node.counters["node_calls_unknown_op"] += 1
            reply["error"] = {"code": UNKNOWN_OP, "message": f"{op} is unknown on {self.path.node_id}"}
            await self.path.send_to_node(message["reply_to"], reply, "node call reply")
            return
        try:
            reply["result"] = await call_handler(op)(self.path.node, message["body"])
        except Refused as refused:
            reply["error"] = {"code": refused.code, "message": refused.message, "retry_after_ms": refused.retry_after_ms}
        except Exception:
            logger.exception("node call %s failed", message.get("op"))
            reply["error"] = {"code": "internal", "message": f"{message.get('op')} failed on {self.path.node_id}"}
        await self.path.send_to_node(message["reply_to"], reply, "node call reply")

    def resolve(self, reply: dict[str, Any]) -> None:
        future = self._calls.pop(reply["call_id"], None)
        if future is not None and not future.done():
            future.set_result(reply)


@node_message_handler(CALL)
async def on_call(node: Any, message: dict[str, Any]) -> None:
    # Answered in a task of its own: a slow request never stalls the listener.
    spawn(node.calls.answer(message), name="qim-node-call")


@node_message_handler(REPLY)
async def on_reply(node: Any, message: dict[str, Any]) -> None:
    node.calls.resolve(message)
