"""QimClient: one authenticated WebSocket session with request/reply matching, pushes, reconnect and mailbox sync."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from .backoff import Backoff
from .calls import CallRequests, CallTracker
from .codec import Frame, decode_frame, encode_frame
from .cursor import CursorStore
from .errors import ConnectionLost, QimError
from .handshake import SessionHandshake, code_of
from .messaging import ConversationRequests, new_client_msg_id
from .pipeline import RequestPipelining
from .pushes import PushCallback, PushCallbacks, PushQueue
from .registry import RegistryAccess, RegistrySync, TypeRegistry
from .reconnect import ReconnectHook, ReconnectLoop
from .room_requests import RoomRequests
from .rooms import RoomSync
from .mailbox_access import MailboxAccess
from .sync import MailboxSync
from .version import __version__

logger = logging.getLogger("qimclient")

# Replies that arrive after their request timed out are dropped, not mistaken for pushes.
_ABANDONED_MEMORY = 1024


class QimClient(
    SessionHandshake, ReconnectLoop, RequestPipelining, ConversationRequests, MailboxAccess, RoomRequests, RegistryAccess,
    CallRequests,
):
    """An asyncio client for the QIM WebSocket protocol (`/ws/v1`, protocol.md §4).

    Frames carrying a `req_id` of a pending `request()` resolve it; everything else (pushes,
    and answers to frames sent with `send_frame`) goes to the push queue and callbacks.
    With `sync` on, mailbox events also flow, ordered and deduplicated, through MailboxSync
    (`on_event`, `next_event`): a SYNC catch-up on every connect and reconnect, then EVENTs.
    Joined rooms flow through RoomSync (`on_room_event`, `next_room_event`), rejoined after
    every reconnect. Message objects and room events get a `render` decision from the
    client's registry snapshot (RegistrySync), kept current when `track_registry` is on.
    Calls (§12) are tracked in `calls`, their RTC_SIGNAL pushes also handed to
    `on_call_signal` / `next_call_signal` (CallTracker).
    """

    def __init__(
        self,
        ws_url: str,
        token: str,
        device_id: str,
        *,
        client_version: str = __version__,
        request_timeout: float = 10.0,
        reconnect: bool = True,
        origin: str | None = None,
        backoff: Backoff | None = None,
        max_queued_pushes: int = 10_000,
        sync: bool = True,
        cursor_store: CursorStore | None = None,
        sync_page_size: int | None = None,
        max_queued_events: int = 10_000,
        client_msg_ids: Callable[[], str] = new_client_msg_id,
        track_registry: bool | None = None,
        registry: TypeRegistry | None = None,
        max_queued_room_events: int = 10_000,
        max_queued_call_signals: int = 1_000,
    ) -> None:
        self.ws_url = ws_url
        self.token = token
        self.device_id = device_id
        self.client_version = client_version
        self.request_timeout = request_timeout
        self.reconnect = reconnect
        self.origin = origin
        self.backoff = backoff if backoff is not None else Backoff()
        self.client_msg_ids = client_msg_ids
        # The AUTH_OK of the current (or last) session.
        self.auth_ok: Frame | None = None
        # Close code and reason of the last socket that closed, whoever closed it.
        self.close_code: int | None = None
        self.close_reason: str | None = None
        # Why reconnecting stopped, when it gave up (e.g. the token was revoked).
        self.last_error: BaseException | None = None
        # The ordered event stream; None with sync=False (then `cursor` is only yours to move).
        self.mailbox: MailboxSync | None = None
        # The tenant's custom message types as last fetched (§6), from `registry` (a saved
        # snapshot) if given; tracking (None: as `sync`) brings it up to date by since_version.
        self.registry_sync = RegistrySync(self, registry, auto=sync if track_registry is None else track_registry)
        if sync:
            self.mailbox = MailboxSync(
                self, cursor_store, page_size=sync_page_size, max_queued_events=max_queued_events,
                backoff=self.backoff, prepare=self._render_events,
            )
        self.rooms = RoomSync(
            self, prepare=self._render_messages, max_queued_items=max_queued_room_events, backoff=self.backoff
        )
        self.call_tracker = CallTracker(max_queued_call_signals)
        self._init_session_state(max_queued_pushes)

    def _init_session_state(self, max_queued_pushes: int) -> None:
        """The socket, the requests awaiting replies and the push queue (none yet)."""
        self._cursor = 0
        self.reconnects = 0
        self.invalid_frames = 0
        # Requests written behind AUTH before its AUTH_OK came (a reconnect's catch-up).
        self.pipelined_requests = 0
        # Awaited in order after each successful reconnect, e.g. to SYNC from `cursor`.
        self.on_reconnect: list[ReconnectHook] = []
        self._pushes = PushQueue(max_queued_pushes)
        self._callbacks = PushCallbacks()
        self._pending: dict[str, asyncio.Future[Frame]] = {}
        self._abandoned: deque[str] = deque(maxlen=_ABANDONED_MEMORY)
        self._req_ids = itertools.count(1)
        self._ws: ClientConnection | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._hook_tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._connected = asyncio.Event()
        self._finished = asyncio.Event()

    # Session lifecycle

    async def connect(self) -> Frame:
        """Open the socket, AUTH, and start reading; returns AUTH_OK.

        Raises AuthError on a refused AUTH, TimeoutError if the server does not answer in
        `request_timeout`, and OSError / websockets InvalidHandshake (e.g. an Origin outside
        `QIM_ALLOWED_ORIGINS`) when the socket cannot open. The first connect never retries.
        """
        if self._supervisor is not None and not self._supervisor.done():
            raise RuntimeError("already connected; call close() first")
        self._closing = False
        self._finished.clear()
        self.last_error = None
        try:
            ws, auth_ok, _ = await self._open_and_authenticate()
        except BaseException:
            self._finished.set()
            raise
        self._install(ws, auth_ok)
        self._supervisor = asyncio.create_task(self._supervise(), name="qimclient-reader")
        if self.mailbox is not None:
            self.mailbox.start()
        self.rooms.start()
        if self.rooms.rooms:  # connect() again after close(): back into the rooms it was in
            self._spawn(self.rooms.rejoin_all(), "qimclient-rejoin")
        return auth_ok

    async def close(self) -> None:
        """Close for good: no reconnect; pending requests fail with ConnectionLost."""
        self._closing = True
        ws = self._ws
        if ws is not None:
            await ws.close()
            self._record_close(ws)
        task = self._supervisor
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        if self.mailbox is not None:
            await self.mailbox.stop()
        await self.rooms.stop()
        await self.registry_sync.stop()
        self._connected.clear()
        self._fail_pending(ConnectionLost("client closed the connection", self.close_code))
        self._finished.set()

    async def __aenter__(self) -> QimClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def is_connected(self) -> bool:
        """True while an authenticated socket is open."""
        return self._connected.is_set()

    @property
    def is_closed(self) -> bool:
        """True once closed for good: `close()` was called, or reconnecting gave up."""
        return self._finished.is_set()

    @property
    def cursor(self) -> int:
        """The device's mailbox position (§5 SYNC `after_mailbox_seq`); 0 is the beginning.

        With sync on, MailboxSync moves (and saves) it; set it only before `connect()`.
        """
        return self.mailbox.cursor if self.mailbox is not None else self._cursor

    @cursor.setter
    def cursor(self, mailbox_seq: int) -> None:
        if self.mailbox is not None:
            self.mailbox.cursor = mailbox_seq
            self.mailbox.store.save(mailbox_seq)
        else:
            self._cursor = mailbox_seq

    @property
    def user_id(self) -> str | None:
        """The authenticated user's id, from AUTH_OK."""
        return None if self.auth_ok is None else self.auth_ok.get("user_id")

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until authenticated (e.g. after a drop); ConnectionLost once the client gave up or closed."""
        async with asyncio.timeout(timeout):
            while not self._connected.is_set():
                if self._finished.is_set():
                    raise ConnectionLost("client is closed and will not reconnect", self.close_code)
                waiters = [asyncio.ensure_future(e.wait()) for e in (self._connected, self._finished)]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()

    # Requests and raw sends

    async def request(self, frame_type: str, /, **fields: Any) -> Frame:
        """Send `{type: frame_type, req_id, **fields}` and return the reply echoing its req_id.

        Raises QimError on `ERROR`, TimeoutError after `request_timeout`, ConnectionLost if
        the socket is down or drops first. A `req_id` in `fields` is used instead of a fresh one.
        """
        if "type" in fields:
            raise TypeError("pass the frame type as the first argument, not as a field")
        return await self.request_frame({"type": frame_type, **fields})

    async def request_frame(self, frame: Frame, *, timeout: float | None = None) -> Frame:
        """Like `request()` for a prepared frame dict; `timeout` overrides `request_timeout`."""
        frame, reply = self._register(frame)
        try:
            ws = self._require_socket()
            await ws.send(encode_frame(frame))
        except BaseException as error:
            self._forget(frame["req_id"], reply)
            if isinstance(error, ConnectionClosed):
                self._note_closed(ws)
                raise ConnectionLost("connection closed while sending", code_of(error)) from None
            raise
        return await self._await_reply(frame, reply, timeout)

    def _register(self, frame: Frame) -> tuple[Frame, asyncio.Future[Frame]]:
        """A copy of `frame` with its `req_id`, and the future its reply will resolve."""
        frame = dict(frame)
        req_id = frame.setdefault("req_id", f"r{next(self._req_ids)}")
        if not isinstance(req_id, str):
            raise TypeError("req_id must be a string (§4)")
        if req_id in self._pending:
            raise ValueError(f"req_id {req_id!r} is already awaiting a reply")
        reply: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = reply
        return frame, reply

    async def _await_reply(self, frame: Frame, reply: asyncio.Future[Frame], timeout: float | None) -> Frame:
        req_id = frame["req_id"]
        try:
            wait = self.request_timeout if timeout is None else timeout
            try:
                async with asyncio.timeout(wait):
                    answer = await reply
            except TimeoutError:
                self._abandoned.append(req_id)
                raise TimeoutError(f"no reply to {frame.get('type')} {req_id} within {wait} s") from None
        finally:
            self._forget(req_id, reply)
        if answer.get("type") == "ERROR":
            raise QimError.from_frame(answer)
        return answer

    async def send_frame(self, frame: Frame) -> None:
        """Send a frame as is and do not wait (TYPING, or deliberately malformed test frames)."""
        await self.send_raw(encode_frame(frame))

    async def send_raw(self, text: str) -> None:
        """Send arbitrary text as one WebSocket text message."""
        ws = self._require_socket()
        try:
            await ws.send(text)
        except ConnectionClosed as closed:
            self._note_closed(ws)
            raise ConnectionLost("connection closed while sending", code_of(closed)) from None

    # Pushes

    async def next_push(self, timeout: float | None = 10.0, type: str | None = None) -> Frame:
        """Next queued push, optionally the next of `type` (others stay queued in order).

        Raises TimeoutError when none arrives within `timeout` seconds; None waits forever.
        """
        return await self._pushes.get(timeout, type)

    def drain_pushes(self) -> list[Frame]:
        """All queued pushes, oldest first, without waiting."""
        return self._pushes.drain()

    def on_push(self, frame_type: str, callback: PushCallback) -> Callable[[], None]:
        """Call `callback(frame)` for each push of `frame_type` (`"*"`: all); returns its remover.

        Pushes are queued as well, so `next_push()` still sees them. Async callbacks run as
        tasks and may call `request()`; a failing callback is logged.
        """
        return self._callbacks.add(frame_type, callback)

    # Internals: reading

    def _install(self, ws: ClientConnection, auth_ok: Frame) -> None:
        self._ws = ws
        self.auth_ok = auth_ok
        self._connected.set()
        self.registry_sync.announce(auth_ok.get("registry_version"))

    async def _read_frames(self, ws: ClientConnection) -> None:
        try:
            async for message in ws:
                self._dispatch(message)
        except ConnectionClosed:
            pass

    def _dispatch(self, message: str | bytes) -> None:
        frame = decode_frame(message)
        if frame is None:
            self._note_invalid(message)
            return
        frame_type = frame.get("type")
        logger.debug("received %s", frame_type)
        if frame_type == "ROOM_BATCH":
            # Replies as well as pushes, in arrival order: a join's replay precedes the live
            # batches that follow it.
            self.rooms.accept(frame)
        req_id = frame.get("req_id")
        if isinstance(req_id, str):
            waiter = self._pending.get(req_id)
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(frame)
                return
            if req_id in self._abandoned:
                logger.debug("dropping late reply to %s", req_id)
                return
        if frame_type == "EVENT":
            self._render_pushed_event(frame.get("event"))
        elif frame_type == "RTC_SIGNAL":
            self.call_tracker.accept(frame)  # before the push callbacks, so `calls` is current
        elif frame_type == "REGISTRY_UPDATED":
            self.registry_sync.announce(frame.get("registry_version"))
        self._pushes.put(frame)
        self._callbacks.dispatch(frame)
        if self.mailbox is not None and frame_type == "EVENT":
            self.mailbox.offer(frame.get("event"))

    # Internals: bookkeeping

    def _require_socket(self) -> ClientConnection:
        if self._ws is None or not self._connected.is_set():
            state = "closed" if self._finished.is_set() or self._ws is None else "reconnecting"
            raise ConnectionLost(f"not connected ({state})", self.close_code)
        return self._ws

    def _note_closed(self, ws: ClientConnection) -> None:
        """A send found the socket closed before the reader noticed: not connected from now on,
        so that `wait_connected` waits for the reconnect. Without this a retry loop (SEND's)
        spun through its retries without yielding, and the reader never got to run."""
        if self._ws is ws:
            self._connected.clear()

    def _record_close(self, ws: ClientConnection) -> None:
        if ws.close_code is not None:
            self.close_code = ws.close_code
            self.close_reason = ws.close_reason

    def _fail_pending(self, error: ConnectionLost) -> None:
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(error)
        self._pending.clear()

    def _note_invalid(self, message: str | bytes) -> None:
        self.invalid_frames += 1
        logger.warning("ignoring a frame that is not a JSON object: %.200r", message)


