"""Turns between overlapping batches of one key (qim/batching_overlap.py): a batch may do its
reads while the one before it writes, but takes the key's lock only once the one before has
written; so the order of their rows is the order the batches started in, as when they ran
one after the other.

The batch running in a DB thread finds its turn in a context variable (asgiref copies the
context into the thread); outside an overlapping batcher there is none and both calls do
nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class Turn:
    """One batch's place after the batch started before it (`previous`, or None)."""

    def __init__(self, previous: Turn | None, on_hand_over: Callable[[], None] | None = None) -> None:
        self._previous = previous
        self._handed_over = threading.Event()
        self._on_hand_over = on_hand_over  # called from the thread that hands over, once

    def wait_for_previous(self) -> None:
        previous = self._previous
        if previous is not None:
            previous._handed_over.wait()
            self._previous = None  # no chain of finished batches kept alive

    def hand_over(self) -> None:
        """The next batch may take the lock now (it then queues behind this one's commit)."""
        if self._handed_over.is_set():
            return
        self._handed_over.set()
        if self._on_hand_over is not None:
            self._on_hand_over()

    @property
    def handed_over(self) -> bool:
        return self._handed_over.is_set()


_current: ContextVar[Turn | None] = ContextVar("qim_turn", default=None)


@contextmanager
def taking(turn: Turn) -> Iterator[None]:
    token = _current.set(turn)
    try:
        yield
    finally:
        _current.reset(token)


def wait_for_turn() -> None:
    """Before taking the key's lock: until the batch started before this one has written."""
    turn = _current.get()
    if turn is not None:
        turn.wait_for_previous()


def hand_over_turn() -> None:
    """After this batch's writes, before its commit: let the next batch take the lock."""
    turn = _current.get()
    if turn is not None:
        turn.hand_over()
