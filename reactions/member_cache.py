"""Per-process caches of a conversation's members, read on every REACT and REACTION_UPDATE.

Counting or listing 100 000 intervals on every REACT would not do, and members change rarely,
so each entry lives `ttl_s`. A membership row saved on this node (a leave or a removal: the
interval's `left_at` is set with `save()`) forgets the conversation's entries once its
transaction commits, so a removed member stops getting REACTION_UPDATE at once, not up to
`ttl_s` later. Each cache takes its clock, so tests can move time instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.db import transaction

V = TypeVar("V")

MEMBERS_TTL_S = 5.0


class TtlCache(Generic[V]):
    """`get(key, load)`: the value loaded less than `ttl_s` ago (by `clock`), else a new load."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._entries: dict[str, tuple[float, V]] = {}
        self._lock = threading.Lock()  # DB threads read and fill it concurrently

    def get(self, key: str, load: Callable[[], V]) -> V:
        with self._lock:
            cached = self._entries.get(key)
        if cached is not None and self.clock() - cached[0] < self.ttl_s:
            return cached[1]
        loaded_at, value = self.clock(), load()
        with self._lock:
            self._entries[key] = (loaded_at, value)
        return value

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)


# The current members' user ids (REACTION_UPDATE recipients) and their count (detail rows).
member_ids: TtlCache[list[str]] = TtlCache(MEMBERS_TTL_S)
member_counts: TtlCache[int] = TtlCache(MEMBERS_TTL_S)


def forget_conversation(conversation_id: str) -> None:
    member_ids.forget(conversation_id)
    member_counts.forget(conversation_id)


def membership_saved(sender: Any, instance: Any, **kwargs: Any) -> None:
    """post_save of MembershipInterval: forget now (a load racing the write may refill the
    entry with the old members) and again once the write commits."""
    conversation_id = instance.conversation_id
    forget_conversation(conversation_id)
    transaction.on_commit(lambda: forget_conversation(conversation_id))
