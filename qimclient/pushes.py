"""Where frames that answer no pending request go: an ordered queue and per-type callbacks."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from .codec import Frame

logger = logging.getLogger("qimclient")

PushCallback = Callable[[Frame], Awaitable[None] | None]
ANY_TYPE = "*"


class PushQueue:
    """Arrival-ordered pushes; a typed read takes the first match and leaves the others in order.

    Bounded so a long-lived client that only uses callbacks cannot grow without limit; when
    full the oldest push is dropped and `dropped` counts it.
    """

    def __init__(self, maxsize: int = 10_000, *, key: str = "type", noun: str = "push") -> None:
        self.maxsize = maxsize
        # The field a filtered read matches (frames: "type"; room items: "room_id").
        self.key = key
        self.noun = noun
        self.dropped = 0
        self._frames: deque[Frame] = deque()
        self._arrival = asyncio.Event()

    def put(self, frame: Frame) -> None:
        """Append a push and wake every waiter (each re-checks its own type filter)."""
        if len(self._frames) >= self.maxsize:
            self._frames.popleft()
            self.dropped += 1
        self._frames.append(frame)
        # A fresh event per arrival: waiters with different filters all wake, none misses one.
        arrival, self._arrival = self._arrival, asyncio.Event()
        arrival.set()

    async def get(self, timeout: float | None = 10.0, type: str | None = None) -> Frame:
        """Next push (of `type`, if given); TimeoutError after `timeout` s; None waits forever."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    frame = self._take(type)
                    if frame is not None:
                        return frame
                    await self._arrival.wait()
        except TimeoutError:
            wanted = f"{type} {self.noun}" if type else self.noun
            raise TimeoutError(f"no {wanted} within {timeout} s") from None

    def drain(self) -> list[Frame]:
        """Everything queued now, oldest first, without waiting."""
        frames = list(self._frames)
        self._frames.clear()
        return frames

    def __len__(self) -> int:
        return len(self._frames)

    def _take(self, frame_type: str | None) -> Frame | None:
        for index, frame in enumerate(self._frames):
            if frame_type is None or frame.get(self.key) == frame_type:
                del self._frames[index]
                return frame
        return None


class PushCallbacks:
    """Callbacks by frame type (`"*"` for all); async ones run as tasks so they may await requests."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[PushCallback]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, frame_type: str, callback: PushCallback) -> Callable[[], None]:
        """Register `callback`; returns a function that unregisters it."""
        self._callbacks.setdefault(frame_type, []).append(callback)

        def remove() -> None:
            callbacks = self._callbacks.get(frame_type, [])
            if callback in callbacks:
                callbacks.remove(callback)

        return remove

    def dispatch(self, frame: Frame) -> None:
        """Call every matching callback; a failing callback is logged, never fatal to the reader."""
        matching = self._callbacks.get(str(frame.get("type")), []) + self._callbacks.get(ANY_TYPE, [])
        for callback in matching:
            try:
                result = callback(frame)
            except Exception:
                logger.exception("push callback %r failed", callback)
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(self._guard(callback, result))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _guard(callback: PushCallback, result: Awaitable[None]) -> None:
        try:
            await result
        except Exception:
            logger.exception("push callback %r failed", callback)
