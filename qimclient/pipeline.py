"""Requests written before their replies are awaited: a reconnect writes AUTH and, in the same
turn, every room's ROOM_JOIN and the mailbox's SYNC (protocol.md §3: a socket's frames are
handled in order, AUTH first), so that catching up takes one round trip instead of one per room."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .codec import Frame, encode_frame

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

# QimClient's reply waiter: (frame, its future, timeout or None) -> the reply, raising as
# `request()` does (QimError on ERROR, TimeoutError, ConnectionLost).
AwaitReply = Callable[[Frame, "asyncio.Future[Frame]", "float | None"], Awaitable[Frame]]
# Forget a request nobody will await: its reply, when it comes, is dropped, not pushed.
Abandon = Callable[[str], None]


class SentRequest:
    """One request already on the wire (pipelined behind AUTH). Exactly one of `reply()` and
    `discard()` is called for it; a failure nobody awaited is never logged as unretrieved."""

    def __init__(self, frame: Frame, future: asyncio.Future[Frame], await_reply: AwaitReply, abandon: Abandon) -> None:
        self.frame = frame
        self._future = future
        self._await_reply = await_reply
        self._abandon = abandon
        future.add_done_callback(_seen)

    @property
    def frame_type(self) -> str:
        return str(self.frame.get("type"))

    async def reply(self, timeout: float | None = None) -> Frame:
        """The answer, as `request()` returns it (timeout: the client's `request_timeout`)."""
        return await self._await_reply(self.frame, self._future, timeout)

    def discard(self) -> None:
        """Nobody will use the answer (the room was left, the cursor moved on)."""
        self._abandon(str(self.frame["req_id"]))
        self._future.cancel()


def _seen(future: asyncio.Future[Frame]) -> None:
    if not future.cancelled():
        future.exception()


class RequestPipelining:
    """QimClient's writing of requests behind AUTH (mixed in; the attributes are QimClient's)."""

    if TYPE_CHECKING:
        pipelined_requests: int
        _pending: dict[str, asyncio.Future[Frame]]
        _abandoned: deque[str]

        def _register(self, frame: Frame) -> tuple[Frame, asyncio.Future[Frame]]: ...
        async def _await_reply(self, frame: Frame, reply: asyncio.Future[Frame], timeout: float | None) -> Frame: ...

    async def _write_pipelined(self, ws: ClientConnection, frames: list[Frame]) -> list[SentRequest]:
        """Write `frames` as requests without waiting for any reply (nor, behind AUTH, for
        AUTH_OK): sending yields only when the socket's buffer is full, so they normally leave
        in the turn that wrote AUTH. Their replies resolve once the reader runs."""
        sent = []
        for frame in frames:
            frame, reply = self._register(frame)
            sent.append(SentRequest(frame, reply, self._await_reply, self._abandon))
            await ws.send(encode_frame(frame))
            self.pipelined_requests += 1
        return sent

    def _abandon(self, req_id: str) -> None:
        self._pending.pop(req_id, None)
        self._abandoned.append(req_id)

    def _forget(self, req_id: str, reply: asyncio.Future[Frame]) -> None:
        if self._pending.get(req_id) is reply:
            del self._pending[req_id]
        if reply.done() and not reply.cancelled():
            # Failed by a lost connection while the send was still raising: that error is
            # the one the caller gets; this one is seen, so asyncio does not log it.
            reply.exception()
