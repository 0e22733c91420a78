"""The one way pushes leave: after the transaction that wrote what they announce commits.

Actions call `push_on_commit`; the push goes out through this process's ConnectionNode,
grouped by node. A rollback sends nothing. Inside `in_db_thread` (qim/gateway/db.py) the pushes a
call commits are handed back and written by the event loop when the call returns, so the DB
thread never waits on the loop; elsewhere (a DRF view, a management command) each push runs
on the loop at once through async_to_sync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, ParamSpec, TypeVar

from asgiref.sync import async_to_sync
from django.db import transaction

from qim.node.connection_node import get_node
from qim.node.conversation_push import ConversationPush
from qim.node.user_push import UserPush

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


async def deliver(push: UserPush | ConversationPush) -> None:
    if isinstance(push, ConversationPush):
        await get_node().send_to_conversation(push)
    else:
        await get_node().send_to_users(push)


async def deliver_all(pushes: list[UserPush]) -> None:
    """Best effort, in commit order: the mailbox is the truth and SYNC heals."""
    for push in pushes:
        try:
            await deliver(push)
        except Exception:
            logger.exception("push after commit failed")


# The pushes committed by the in_db_thread call running on this thread, if any.
_collected = threading.local()


def push_on_commit(push: UserPush | ConversationPush) -> None:
    """Send `push` once the current transaction commits (at once outside a transaction)."""

    def send() -> None:
        push.committed_at = time.time()
        pending: list[UserPush] | None = getattr(_collected, "pushes", None)
        if pending is not None:
            pending.append(push)
            return
        try:
            async_to_sync(deliver)(push)
        except Exception:
            logger.exception("push after commit failed")

    transaction.on_commit(send)


@dataclass
class Collected(Generic[R]):
    """What a sync call returned or raised, and the pushes its commits made."""

    pushes: list[UserPush]
    result: R | None = None
    error: BaseException | None = None

    def unwrap(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


def collecting_pushes(fn: Callable[P, R]) -> Callable[P, Collected[R]]:
    """Run `fn` keeping the pushes its commits make (and what it raised) for the caller: a
    push committed before a later failure still has to go out."""

    def run(*args: P.args, **kwargs: P.kwargs) -> Collected[R]:
        outer = getattr(_collected, "pushes", None)
        _collected.pushes = pushes = []
        try:
            return Collected(pushes, result=fn(*args, **kwargs))
        except Exception as error:
            return Collected(pushes, error=error)
        finally:
            _collected.pushes = outer

    return run
