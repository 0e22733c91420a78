"""Reconnecting (protocol.md §3, §5): backoff between attempts, giving up on a final close,
the catch-up written behind AUTH (every room's ROOM_JOIN, the mailbox's SYNC: one round trip),
and the hooks that run once a new session is up (rooms first, then the caller's)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .errors import AuthError, ConnectionLost
from .handshake import FINAL_CLOSE_CODES

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

    from .backoff import Backoff
    from .codec import Frame
    from .pipeline import SentRequest
    from .rooms import RoomSync
    from .sync import MailboxSync

logger = logging.getLogger("qimclient")

# Awaited in order after each successful reconnect (QimClient.on_reconnect), with the client.
ReconnectHook = Callable[[Any], Awaitable[None]]


class ReconnectLoop:
    """QimClient's reconnect half (mixed in; the attributes it uses are QimClient's)."""

    if TYPE_CHECKING:
        reconnect: bool
        backoff: Backoff
        close_code: int | None
        last_error: BaseException | None
        rooms: RoomSync
        on_reconnect: list[ReconnectHook]
        reconnects: int
        mailbox: MailboxSync | None
        _ws: ClientConnection | None
        _closing: bool
        _connected: asyncio.Event
        _finished: asyncio.Event
        _hook_tasks: set[asyncio.Task[None]]

        async def _read_frames(self, ws: ClientConnection) -> None: ...
        def _record_close(self, ws: ClientConnection) -> None: ...
        def _fail_pending(self, error: ConnectionLost) -> None: ...

        async def _open_and_authenticate(
            self, pipelined: Callable[[], list[Frame]] | None = None
        ) -> tuple[ClientConnection, Frame, list[SentRequest]]: ...
        def _install(self, ws: ClientConnection, auth_ok: Frame) -> None: ...

    async def _supervise(self) -> None:
        """Read until the socket drops, then reconnect with backoff, until closed or given up."""
        try:
            while True:
                ws = self._ws
                assert ws is not None
                await self._read_frames(ws)
                self._connected.clear()
                self._record_close(ws)
                if self.mailbox is not None and not self._closing:
                    # Pushes sent while we are away are lost; the next session must SYNC.
                    self.mailbox.request_sync()
                self.rooms.connection_lost()
                reason = "client closed the connection" if self._closing else "connection lost"
                self._fail_pending(ConnectionLost(reason, self.close_code))
                if not self._should_reconnect():
                    return
                logger.warning("connection lost (close code %s), reconnecting", self.close_code)
                rejoins = await self._reconnect()
                if rejoins is None:
                    return
                self.reconnects += 1
                self._start_reconnect_hooks(rejoins)
        except Exception as error:  # a reader bug must not leave requests hanging
            logger.exception("qimclient reader stopped")
            self.last_error = error
            self._connected.clear()
            self._fail_pending(ConnectionLost(f"reader stopped: {error}", self.close_code))
        finally:
            if not self._connected.is_set():
                self._finished.set()

    def _should_reconnect(self) -> bool:
        if self._closing or not self.reconnect:
            return False
        if self.close_code in FINAL_CLOSE_CODES:
            self.last_error = ConnectionLost("server revoked the session", self.close_code)
            return False
        return True

    async def _reconnect(self) -> dict[str, SentRequest] | None:
        """Retry open+AUTH with backoff, each attempt with its catch-up written behind AUTH;
        None when closing or the token is refused, else the rooms' ROOM_JOINs sent."""
        attempt = 0
        while not self._closing:
            delay = self.backoff.delay(attempt)
            attempt += 1
            logger.info("reconnecting in %.2f s (attempt %d)", delay, attempt)
            await asyncio.sleep(delay)
            try:
                ws, auth_ok, sent = await self._open_and_authenticate(self._catch_up_requests)
            except AuthError as error:
                if error.code == "unauthenticated" or error.close_code in FINAL_CLOSE_CODES:
                    logger.error("reconnect refused, giving up: %s", error)
                    self.last_error = error
                    return None
                logger.info("reconnect attempt %d failed: %s", attempt, error)
            except Exception as error:
                logger.info("reconnect attempt %d failed: %r", attempt, error)
            else:
                if self._closing:
                    await ws.close()
                    return None
                rejoins = {}
                for request in sent:
                    if request.frame_type == "ROOM_JOIN":
                        rejoins[request.frame["room_id"]] = request
                    elif self.mailbox is not None:
                        self.mailbox.present(request)
                self._install(ws, auth_ok)
                return rejoins
        return None

    def _catch_up_requests(self) -> list[Frame]:
        """What a new session asks first, from the positions as they stand (no reader runs
        while reconnecting, so they cannot move under it): every room, then the mailbox."""
        frames: list[Frame] = [{"type": "ROOM_JOIN", **self.rooms.join_fields(state)} for state in self.rooms.rooms.values()]
        if self.mailbox is not None:
            sync = self.mailbox.catch_up_fields()
            if sync is not None:
                frames.append({"type": "SYNC", **sync})
        return frames

    def _start_reconnect_hooks(self, rejoins: dict[str, SentRequest]) -> None:
        # A task of its own: hooks call request(), whose replies need this reader running.
        self._spawn(self._run_reconnect_hooks(rejoins), "qimclient-on-reconnect")

    def _spawn(self, work: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self._hook_tasks.add(task)
        task.add_done_callback(self._hook_tasks.discard)

    async def _run_reconnect_hooks(self, rejoins: dict[str, SentRequest]) -> None:
        # Rooms first, so that hooks (and room_send retries) find them joined again.
        try:
            await self.rooms.rejoin_all(rejoins)
        except Exception:
            logger.exception("rejoining rooms failed")
        for hook in list(self.on_reconnect):
            try:
                await hook(self)
            except Exception:
                logger.exception("on_reconnect hook %r failed", hook)
