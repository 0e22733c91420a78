"""The points where apps plug into the core: the core calls them, each app registers in its
AppConfig.ready(). So the core imports no app (issue #20) and an app's absence is harmless.

A hook is a plain list walked in registration order (a few calls, no signal machinery), which
keeps the history page and the recall transaction as cheap as the direct calls they replace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from qim.models import Tenant

F = TypeVar("F", bound=Callable[..., Any])


class Hook(Generic[F]):
    """Listeners an app adds once at start-up; registering the same one again is a no-op
    (ready() can run twice in tests)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[F] = []

    def register(self, listener: F) -> F:
        if listener not in self._listeners:
            self._listeners.append(listener)
        return listener

    def __iter__(self) -> Iterator[F]:
        return iter(tuple(self._listeners))

    def __repr__(self) -> str:
        return f"Hook({self.name!r}, {len(self._listeners)} listeners)"


# A message was recalled: `(conversation_id, conversation_seq)`, called inside the recall's
# transaction, after the target row was updated (so its row lock is held: the lock order the
# reactions app's REACT batches rely on). Registered by: reactions (drops the aggregate).
message_recalled: Hook[Callable[[str, int], object]] = Hook("message_recalled")

# A history page's message objects were rendered: `(conversation_id, messages)`, which a
# listener may add fields to in place (one query for the page, not one per message), before
# the page is fitted to its byte budget. Registered by: reactions (the `reactions` field).
history_rendered: Hook[Callable[[str, list[dict[str, Any]]], object]] = Hook("history_rendered")

# qim_bootstrap made (or re-made) a tenant and committed it: `(tenant)`, outside any
# transaction. Registered by: registry (installs the built-in qim.* types).
tenant_created: Hook[Callable[["Tenant"], object]] = Hook("tenant_created")

# Retention deleted a conversation's log below a seq: `(conversation_id, below_seq, batch,
# dry_run)` -> {model label: rows deleted (or, dry, that would be)}. Called after the log rows
# went (a racing REACT then finds no message and adds nothing), outside any transaction: a
# listener commits a batch per transaction. Registered by: reactions (details, aggregates and
# fingerprints of those messages).
conversation_purged: Hook[Callable[[str, int, int, bool], dict[str, int]]] = Hook("conversation_purged")
