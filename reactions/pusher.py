"""REACTION_UPDATE pushes: to members online now, grouped by node, at most one frame per
(conversation, seq) per reaction_push_merge_window, and the last state always delivered.

The window is shared by all nodes: whoever opens it (SET NX with expiry, in Redis when
QIM_REDIS_URL is set) pushes at once and, when the window closes, pushes again if the summary
moved meanwhile, reading the summary from the database, which is the truth. REACTs on other
nodes inside the window push nothing. Counts are absolute, so a dropped frame costs nothing
but freshness.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol


from qim.infra.backends import make_backend, register_backend
from qim.infra.background import spawn
from qim.clock import now_ms
from qim.conf import limit
from qim.gateway.db import in_db_thread
from qim.infra import codec
from qim.node.connection_node import get_node
from qim.notify import UserPush
from qim.queries.conversations import current_members
from qim.infra.redis_client import get_redis
from reactions.member_cache import member_ids
from reactions.models import MessageReactionSummary

logger = logging.getLogger(__name__)

# How long a window stays held while its owner pushes, should the owner die mid-push.
PUSH_BUDGET_S = 30.0


class MergeWindows(Protocol):
    async def open(self, key: str, window_s: float) -> bool:
        """True when no window was open for `key` (the caller owns the new one)."""

    async def restart(self, key: str, window_s: float) -> None:
        """The owner's window runs `window_s` from now: it just pushed."""


class MemoryMergeWindows:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._until: dict[str, float] = {}
        self._clock = clock

    async def open(self, key: str, window_s: float) -> bool:
        now = self._clock()
        if self._until.get(key, 0.0) > now:
            return False
        self._until[key] = now + window_s
        return True

    async def restart(self, key: str, window_s: float) -> None:
        self._until[key] = self._clock() + window_s


class RedisMergeWindows:
    PREFIX = "qim:reaction:window:"

    def __init__(self, redis_factory) -> None:  # type: ignore[no-untyped-def]
        self._redis = redis_factory

    async def open(self, key: str, window_s: float) -> bool:
        return bool(await self._redis().set(self.PREFIX + key, "1", nx=True, px=max(1, int(window_s * 1000))))

    async def restart(self, key: str, window_s: float) -> None:
        await self._redis().set(self.PREFIX + key, "1", px=max(1, int(window_s * 1000)))


def _current_member_ids(conversation_id: str) -> list[str]:
    """Every current member, online or not: send_to_users reaches only the online ones."""
    return member_ids.get(conversation_id, lambda: list(current_members(conversation_id).values()))


def _summary_state(conversation_id: str, seq: int) -> tuple[dict, int] | None:
    row = MessageReactionSummary.objects.filter(conversation_id=conversation_id, conversation_seq=seq).values_list(
        "counts", "summary_version"
    ).first()
    return (row[0], row[1]) if row else None


class ReactionPusher:
    def __init__(self, windows: MergeWindows) -> None:
        self.windows = windows
        self.frames_sent = 0

    async def changed(self, tenant_id: int, conversation_id: str, seq: int, counts: dict, version: int) -> None:
        """Called after a REACT that changed the summary has committed."""
        window = limit("reaction_push_merge_window_s")
        key = f"{conversation_id}:{seq}"
        # Held open for the whole push (which may take a while for a big group), then restarted
        # from the push's end: no other node can push inside the window meanwhile.
        if not await self.windows.open(key, window + PUSH_BUDGET_S):
            return
        await self._push(tenant_id, conversation_id, seq, counts, version)
        # The window counts from the push itself, which can take a while for a big group.
        await self.windows.restart(key, window)
        spawn(self._trailing(tenant_id, conversation_id, seq, version, window), name=f"qim-reaction-trailing-{key}")

    async def _trailing(self, tenant_id: int, conversation_id: str, seq: int, pushed: int, window: float) -> None:
        """At each window's end: push again if the summary moved, and keep the window open."""
        try:
            while True:
                # Just past the window's end, so that our own window has surely expired.
                await asyncio.sleep(window + 0.05)
                state = await in_db_thread(_summary_state)(conversation_id, seq)
                if state is None or state[1] <= pushed:
                    return
                if not await self.windows.open(f"{conversation_id}:{seq}", window + PUSH_BUDGET_S):
                    return  # someone else opened the next window: its owner pushes and trails
                counts, pushed = state
                await self._push(tenant_id, conversation_id, seq, counts, pushed)
                await self.windows.restart(f"{conversation_id}:{seq}", window)
        except Exception:
            logger.exception("trailing REACTION_UPDATE for %s#%s failed", conversation_id, seq)

    async def _push(self, tenant_id: int, conversation_id: str, seq: int, counts: dict, version: int) -> None:
        members = await in_db_thread(_current_member_ids)(conversation_id)
        text = codec.encode({
            "type": "REACTION_UPDATE", "conversation_id": conversation_id,
            "conversation_seq": seq, "counts": counts, "summary_version": version,
            "pushed_at_ms": now_ms(),
        })
        self.frames_sent += 1
        await get_node().send_to_users(UserPush(tenant_id=tenant_id, user_ids=members, text=text))


_pusher: ReactionPusher | None = None


def current_pusher() -> ReactionPusher | None:
    """The pusher if this process made one (metrics read it without making one)."""
    return _pusher


def get_pusher() -> ReactionPusher:
    global _pusher
    if _pusher is None:
        _pusher = ReactionPusher(make_backend("reaction_windows"))  # qim/infra/backends.py chooses
    return _pusher


def register_window_backend() -> None:
    """The two merge-window stores (ReactionsConfig.ready registers them)."""
    register_backend("reaction_windows", memory=MemoryMergeWindows, redis=lambda: RedisMergeWindows(get_redis))
