"""The gateway consumer: one per device connection. It authenticates and dispatches; the
frame handlers in each app's frames module hold the logic."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from autobahn.exception import Disconnected
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from qim.conf import limit
from qim.infra import codec
from qim.node.connection import Connection
from qim.gateway.dispatch import FrameRoute, route_for
from qim.errors import Refused
from qim.server.handshake import release_handshake
from qim.gateway.errors import error_frame, refusal_frame, unavailable_or_internal
from qim.gateway.inbound import convert_frame, parse_frame
from qim.gateway.inbound_budget import CLOSE_FLOODING, InboundBudget, req_id_of
from qim.node.connection_node import get_node
from qim.gateway.close_codes import (
    CLOSE_AUTH_TIMEOUT,
    CLOSE_CREDENTIALS_REVOKED,
    CLOSE_TOO_SLOW,
)
from qim.gateway.consumer_auth import AuthenticatingConsumer
from qim.node.outbound import DIRECT, HELD, QUEUED, TextFrame
from qim.server.wire import DaphneSocket, twisted_buffered
from qim.infra.log_context import frame_scope
from qim.infra import instruments as metrics
from qim.infra.outage import outage_of

logger = logging.getLogger(__name__)

# The node's counter for each way `DaphneSocket.write` took a frame.
WRITTEN = {DIRECT: "frames_written_direct", QUEUED: "frames_written_queued", HELD: "frames_written_held"}


class GatewayConsumer(AuthenticatingConsumer, AsyncWebsocketConsumer):
    """First frame AUTH, then each text frame goes through the dispatch table.

    No per-consumer channel-layer channel (the alias is deliberately unconfigured): pushes
    arrive through the ConnectionNode, which writes to this socket directly.
    """

    channel_layer_alias = "qim.gateway.no-per-consumer-channel"

    conn: Connection | None = None
    _auth_timer: asyncio.TimerHandle | None = None
    # Daphne's socket under this consumer when pushes may bypass autobahn (qim/server/wire.py).
    _socket: DaphneSocket | None = None

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        # An exception can skip websocket_disconnect: the index must be cleaned regardless.
        try:
            await self._serve(scope, receive, send)
        finally:
            await self._cleanup()

    async def _serve(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        """Channels' AsyncConsumer.__call__ without a channel layer (none here) and without a
        task per receive (an idle socket kept one; docs/performance.md,
        "Lean handshake, upgrade, frame and per-socket paths"): in order."""
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        # daphne's input queue (qim/server/lean_queue.py): how many messages wait behind this one.
        waiting = getattr(getattr(receive, "__self__", None), "qsize", None)
        try:
            while True:
                message = await receive()
                behind = waiting() if waiting is not None and self._socket is not None else 0
                if behind:
                    await self._dispatch_held(message, behind, receive)
                else:
                    await self.dispatch(message)
        except StopConsumer:
            pass

    async def _dispatch_held(self, message: dict[str, Any], behind: int, receive) -> None:  # type: ignore[no-untyped-def]
        """This message and the `behind` already queued after it (a pipelined reconnect's
        AUTH, SYNC and ROOM_JOIN, read at once), their replies held and written with one
        `send()` once the last is served: a reply waits at most for the serving of the
        messages that were already there, never for a later read (qim/server/wire.py)."""
        socket = self._socket
        socket.hold()
        try:
            await self.dispatch(message)
            for _ in range(behind):
                await self.dispatch(await receive())
        finally:
            socket.release()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch hops to a thread to close stale DB connections before every
        # message; our handlers do ORM work only through in_db_thread, which does that itself.
        handler = getattr(self, message["type"].replace(".", "_"), None)
        if handler is None:
            raise ValueError(f"no handler for {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        await self.accept()
        metrics.count_socket_accepted()
        self._socket = DaphneSocket.under(self.base_send)
        release_handshake(self.base_send, self.scope)
        # A timer, not a task: a reconnect storm's sockets each made a task and woke it to cancel it.
        self._auth_timer = asyncio.get_running_loop().call_later(limit("auth_timeout_s"), self._auth_timed_out)

    def _auth_timed_out(self) -> None:
        self._auth_timer = None
        if self.conn is None and not self._heard:
            self._closing_task = asyncio.ensure_future(self._close_if_silent())

    async def _close_if_silent(self) -> None:
        # A first frame read in the loop iteration that ran the timer woke this consumer
        # before this task: it has been heard by now, and it decides (tests/walls).
        if not self._heard:
            await self.close(code=CLOSE_AUTH_TIMEOUT)

    _closing_task: asyncio.Future[None] | None = None
    _heard = False  # a first frame came: the AUTH deadline no longer applies

    async def disconnect(self, code: int) -> None:
        metrics.count_socket_closed(code)
        await self._cleanup()

    def _stop_auth_timer(self) -> None:
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None  # not kept, with its callback, for the socket's life

    async def _cleanup(self) -> None:
        self._stop_auth_timer()
        if self.conn is not None:
            conn, self.conn = self.conn, None
            try:
                await get_node().unregister(conn)
            except Exception:
                logger.exception("cleaning up connection %s failed", conn.connection_id)

    async def send_frame(self, frame: dict[str, Any]) -> None:
        await self.send_text(codec.encode(frame))

    async def send_text(self, text: str | TextFrame) -> None:
        """A push or a reply to this socket. A socket that closed a moment ago just misses
        it: its disconnect is on its way, and what it missed is in the mailbox or the ring."""
        if self._too_slow or self._revoked:
            return
        buffered = self.outbound_buffer_bytes()
        if buffered > settings.QIM_MAX_OUTBOUND_BUFFER_BYTES:
            await self._drop_slow_socket(f"{buffered} bytes unread")
            return
        socket = self._socket
        if socket is not None:
            frame = text if isinstance(text, TextFrame) else TextFrame.of(text)
            if socket.writable(frame):
                get_node().counters[WRITTEN[socket.write(frame)]] += 1
                return
        try:
            await self.send(text_data=text.text if isinstance(text, TextFrame) else text)
            get_node().counters["frames_written_autobahn"] += 1
        except Disconnected:
            pass

    def direct_writer(self) -> Callable[[TextFrame, int], int] | None:
        """What Connection.write_now is: the socket's own `write_now`, so that a room's tick
        calls it per member with no layer between (issue 22: the per-frame cost); None
        without a direct path. `_stop_direct_writes` clears it once the socket is being
        closed (too slow, or its credentials revoked): `send_text` then drops the frame."""
        return self._socket.write_now if self._socket is not None else None

    def _stop_direct_writes(self) -> None:
        if self.conn is not None:
            self.conn.write_now = None

    _too_slow = False
    _revoking = False  # a notice and the re-check may both close the socket: once is enough
    _revoked = False

    async def _close_for_credentials(self, reason: str) -> None:
        """ERROR unauthenticated saying why, then close 4403; nothing more is read or sent."""
        if self._revoking:
            return
        self._revoking = True
        frame = {**error_frame("unauthenticated", f"credentials no longer valid: {reason}"), "reason": reason}
        await self.send_frame(frame)
        self._revoked = True
        self._stop_direct_writes()
        await self.close(code=CLOSE_CREDENTIALS_REVOKED)

    def _transport(self):  # type: ignore[no-untyped-def]
        """Daphne's Twisted transport under this socket: daphne hands every application
        `partial(server.handle_reply, protocol)` as its send callable."""
        protocol = (getattr(self.base_send, "args", None) or (None,))[0]
        return getattr(protocol, "transport", None)

    def outbound_buffer_bytes(self) -> int:
        """Bytes written to this socket that the peer has not taken yet (Twisted's buffer)."""
        if self._socket is not None:
            return self._socket.buffered()
        try:
            return twisted_buffered(self._transport())
        except AttributeError:
            return 0

    async def _drop_slow_socket(self, why: str) -> None:
        if self._too_slow:
            return
        self._too_slow = True
        self._stop_direct_writes()
        logger.warning("closing connection %s as too slow: %s", self.conn and self.conn.connection_id, why)
        get_node().counters["slow_sockets_closed"] += 1
        try:
            await self.close(code=CLOSE_TOO_SLOW)
        finally:
            transport = self._transport()
            if transport is not None:
                # The close frame sits behind the unread data: do not wait for a peer that
                # does not read.
                transport.abortConnection()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        size = _utf8_size(text_data) if text_data is not None else len(bytes_data or b"")
        if self._revoked:
            return
        if self.conn is None:
            # The first frame met the AUTH deadline: it decides (AUTH_OK, or ERROR and 4401),
            # however long its lookup takes; the deadline must not close the socket under it.
            self._heard = True
            self._stop_auth_timer()
            with frame_scope("AUTH", req_id_of(text_data)):
                await self._authenticate(text_data, size)
            return
        if not await self._within_inbound_budget(text_data):
            return
        if size > settings.QIM_MAX_INBOUND_FRAME_BYTES:
            await self.send_frame(
                error_frame("too_large", f"frames are limited to {settings.QIM_MAX_INBOUND_FRAME_BYTES} bytes")
            )
            return
        if text_data is None:
            await self.send_frame(error_frame("bad_frame", "frames are JSON text, not binary"))
            return
        await self._dispatch_frame(text_data)

    _inbound: InboundBudget | None = None

    async def _within_inbound_budget(self, text: str | None) -> bool:
        """Over budget: ERROR rate_limited (echoing the frame's req_id), the frame unhandled;
        a sustained flood: close 4430, and nothing more is handled (qim/gateway/inbound_budget.py)."""
        if self._flooding:
            return False
        if self._inbound is None:
            self._inbound = InboundBudget()
        verdict = self._inbound.take()
        if verdict.allowed:
            return True
        if verdict.close:
            self._flooding = True
            logger.warning("closing connection %s as flooding", self.conn and self.conn.connection_id)
            get_node().counters["flooding_sockets_closed"] += 1
            await self.close(code=CLOSE_FLOODING)
            return False
        get_node().counters["inbound_frames_refused"] += 1
        metrics.count_rate_limited("inbound_frame_rate")
        await self.send_frame(error_frame(
            "rate_limited", f"over the inbound frame budget ({limit('inbound_frame_rate'):g} frames/s)",
            req_id_of(text), retry_after_ms=verdict.retry_after_ms,
        ))
        return False

    _flooding = False

    async def _dispatch_frame(self, text: str) -> None:
        try:
            raw = parse_frame(text)
        except Refused as exc:
            await self.send_frame(refusal_frame(exc, None))
            return
        req_id = raw.get("req_id")
        if req_id is not None and not isinstance(req_id, str):
            await self.send_frame(error_frame("bad_frame", "req_id must be a string"))
            return
        frame_type = raw.get("type")
        route = route_for(frame_type) if isinstance(frame_type, str) else None
        if route is None:
            await self.send_frame(
                error_frame("unknown_type", f"unknown frame type {_shown(frame_type)}", req_id)
            )
            return
        # Room ticks give way while a conversation frame is handled, its reply included.
        with get_node().foreground.handling() if route.foreground else nullcontext(), frame_scope(frame_type, req_id):
            await self._handle(route, raw, req_id, text)

    async def _handle(self, route: FrameRoute, raw: dict[str, Any], req_id: str | None, text: str) -> None:
        frame_type = route.frame_type
        started = time.perf_counter()
        metrics.count_frame_in(frame_type)
        try:
            frame = convert_frame(raw, route.schema, frame_type, text)
            reply = await route.handler(self.conn, frame)
        except Refused as exc:
            reply = refusal_frame(exc, req_id)
        except Exception as exc:
            logger.exception("handler for %s failed", frame_type)
            reply = unavailable_or_internal(exc, req_id)
            if outage_of(exc) is not None:
                get_node().counters["redis_unavailable_replies"] += 1
        if reply is not None:
            if req_id is not None:
                reply.setdefault("req_id", req_id)
            await self.send_frame(reply)
        metrics.frame_handled(frame_type, started)


def _utf8_size(text: str) -> int:
    """The frame's size in bytes as the client sent it: an ASCII frame (nearly every one) is
    measured without encoding a copy of it."""
    return len(text) if text.isascii() else len(text.encode())


def _shown(value: Any) -> str:
    """A client's value in an error message, cut short: it may be any JSON."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
