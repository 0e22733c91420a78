"""Conversation work goes before room fan-out on a node (design C-3: a room flood must not
move direct-message delivery on the same node).

A room tick writes one frame to every member socket, hundreds of sockets, a millisecond
slice at a time (rooms/local.py). A DM that arrives meanwhile needs the same event loop for
each of its steps and the same CPU and GIL for its DB thread, so without a rule it advances
between slices and pays for them. The rule: the gateway counts the conversation frames being
handled (SEND, READ, REACT, ...: every frame but the room family), and a tick waits between
slices while any runs, for a bounded time per tick, so a room keeps moving under a steady
stream of conversation traffic. Rooms are the traffic that may lag (they are best-effort by
design, with their own rate limits); committed conversation messages are not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ForegroundWork:
    """How many conversation frames this process is handling, and a way to wait for none."""

    def __init__(self) -> None:
        self.running = 0
        self._waiters: list[asyncio.Future[None]] = []

    @contextmanager
    def handling(self) -> Iterator[None]:
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            if self.running == 0:
                self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def quiet(self, at_most: float) -> float:
        """Return once no conversation frame is being handled, or after `at_most` seconds;
        the seconds waited (0.0 at once when none runs, the usual case)."""
        if self.running == 0 or at_most <= 0:
            return 0.0
        started = time.perf_counter()
        waiter = asyncio.get_running_loop().create_future()
        self._waiters = [*(w for w in self._waiters if not w.done()), waiter]
        try:
            await asyncio.wait_for(waiter, at_most)
        except TimeoutError:
            pass
        return time.perf_counter() - started
