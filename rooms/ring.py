"""RoomRing: one room's recent events in memory, ascending by room_seq, bounded by count and
age, whichever evicts first (ADR-0007). No disk: a new writer starts a new epoch instead."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

COUNTER_BITS = 48
COUNTER_MASK = (1 << COUNTER_BITS) - 1


def make_room_seq(epoch: int, counter: int) -> int:
    return (epoch << COUNTER_BITS) | counter


def split_room_seq(room_seq: int) -> tuple[int, int]:
    return room_seq >> COUNTER_BITS, room_seq & COUNTER_MASK


@dataclass(frozen=True)
class Replay:
    events: list[dict[str, Any]]
    truncated: bool
    reason: str | None = None


class RoomRing:
    def __init__(self, epoch: int, max_items: int, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.epoch = epoch
        self.max_items = max(1, max_items)
        self.max_age_s = max_age_s
        self._clock = clock
        self._items: deque[tuple[float, dict[str, Any]]] = deque()
        self.counter = 0

    def next_seq(self) -> int:
        self.counter += 1
        return make_room_seq(self.epoch, self.counter)

    def append(self, event: dict[str, Any]) -> None:
        """`event["room_seq"]` must come from next_seq(): the ring stays ascending."""
        self._items.append((self._clock(), event))
        self.evict()

    def evict(self) -> None:
        while len(self._items) > self.max_items:
            self._items.popleft()
        horizon = self._clock() - self.max_age_s
        while self._items and self._items[0][0] < horizon:
            self._items.popleft()

    @property
    def latest_room_seq(self) -> int:
        return make_room_seq(self.epoch, self.counter)

    @property
    def earliest_room_seq(self) -> int | None:
        self.evict()
        return self._items[0][1]["room_seq"] if self._items else None

    def replay(self, after_room_seq: int) -> Replay:
        """Events after `after_room_seq` (exclusive), or a truncation that says why (§8).

        Outside the window is the normal steady state of a room, never an error."""
        self.evict()
        epoch, counter = split_room_seq(after_room_seq)
        if after_room_seq == 0:
            events = [e for _, e in self._items]
            lost = bool(self.counter) and (not events or split_room_seq(events[0]["room_seq"])[1] > 1)
            return Replay(events, lost, "evicted" if lost else None)
        if epoch != self.epoch:
            return Replay([], True, "ahead" if epoch > self.epoch else "epoch_changed")
        if counter > self.counter:
            return Replay([], True, "ahead")
        earliest = self.earliest_room_seq
        oldest_held = split_room_seq(earliest)[1] if earliest is not None else self.counter + 1
        if counter < oldest_held - 1:
            return Replay([], True, "evicted")
        return Replay([e for _, e in self._items if e["room_seq"] > after_room_seq], False)

    def between(self, after_room_seq: int, before_room_seq: int) -> list[dict[str, Any]]:
        """The events held strictly between the two positions, ascending."""
        self.evict()
        return [e for _, e in self._items if after_room_seq < e["room_seq"] < before_room_seq]

    def __len__(self) -> int:
        return len(self._items)
