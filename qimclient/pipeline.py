"""Requests written before their replies are awaited: a reconnect writes AUTH and, in the same
turn, every room's ROOM_JOIN and the mailbox's SYNC (protocol.md §3: a socket's frames are
handled in order, AUTH first), so that catching up takes one round trip instead of one per room."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .codec import Frame

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
