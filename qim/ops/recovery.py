"""Finishing what a dead node left half done (design §2, C-5): recall and edit events whose
step 2 never ran, and read syncs whose merge window closed unflushed.

Runs once per node process, before it serves anything (daphne has no lifespan event, so the
first ASGI scope of any kind waits for it: RecoverOnStart), and on demand from
`manage.py qim_recover`. Then, every QIM_RECOVERY_INTERVAL_S, each node looks again at the
recall and edit events of the last RECENT_S (not the newest SETTLE_MS, whose step 2 is
running now): a node that died between the steps is finished by the others, not only when it
comes back, and so is a step 2 that failed. Every step is idempotent, so several nodes recovering at once, or a
recovery racing a live recall, at worst push an EVENT twice (clients dedupe by mailbox_seq).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass
from typing import Any, Awaitable

from asgiref.sync import markcoroutinefunction
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from qim.actions.edit import do_apply_edit
from qim.actions.read_sync import flush_due_read_syncs
from qim.actions.recall import do_apply_recall
from qim.infra.background import every, spawn
from qim.clock import now_ms
from qim.content_types import EDIT, RECALL
from qim.gateway.db import in_db_thread
from qim.models import MessageRecord

logger = logging.getLogger(__name__)

# The periodic pass looks at events logged between RECENT_S and SETTLE_MS ago: older ones were
# seen by earlier passes (and by every node's startup pass), newer ones are still in flight.
RECENT_S = 600
SETTLE_MS = 5_000


@dataclass
class Recovered:
    recalls: int = 0
    edits: int = 0
    read_syncs: int = 0

    def report(self) -> dict[str, int]:
        return asdict(self)


def _anchor_events(content_type: str, unfinished_target: Q, logged: Q) -> list[MessageRecord]:
    targets = MessageRecord.objects.filter(
        unfinished_target,
        conversation_id=OuterRef("conversation_id"),
        conversation_seq=OuterRef("target_conversation_seq"),
    )
    return list(
        MessageRecord.objects.filter(
            Exists(targets), logged, kind=MessageRecord.CONTROL, content_type=content_type,
            target_conversation_seq__isnull=False,
        )
        .select_related("sender", "conversation")
        .order_by("conversation_id", "conversation_seq")
    )


def recover_recalls(logged: Q = Q()) -> int:
    """Recall every target whose qim.recall.v1 event (of those `logged` selects) is logged
    but whose recall_event_conversation_seq is still empty, and re-issue the event's push."""
    recovered = 0
    for event in _anchor_events(RECALL, Q(recall_event_conversation_seq__isnull=True), logged):
        with transaction.atomic():
            recovered += do_apply_recall(event)
    return recovered


def recover_edits(logged: Q = Q()) -> int:
    """Apply every qim.edit.v1 event newer than its target's edit_event_conversation_seq
    (targets not recalled), oldest first, and re-issue the pushes of those applied."""
    unfinished = Q(recall_event_conversation_seq__isnull=True, state__in=[MessageRecord.NORMAL, MessageRecord.EDITED]) & (
        Q(edit_event_conversation_seq__isnull=True) | Q(edit_event_conversation_seq__lt=OuterRef("conversation_seq"))
    )
    recovered = 0
    for event in _anchor_events(EDIT, unfinished, logged):
        with transaction.atomic():
            recovered += do_apply_edit(event)
    return recovered


def run_recovery_pass(*, all_read_syncs: bool = False) -> Recovered:
    """Everything above, plus the read syncs that are due (all pending ones with
    `all_read_syncs`). Opens its own transactions."""
    done = Recovered(
        recalls=recover_recalls(),
        edits=recover_edits(),
        read_syncs=flush_due_read_syncs(everything=all_read_syncs),
    )
    if done.recalls or done.edits:
        logger.warning("recovery finished interrupted control events: %s", done.report())
    return done


def recover_recent(now: int) -> Recovered:
    """The periodic pass: recalls and edits logged between RECENT_S and SETTLE_MS before
    `now` (read syncs have their own sweep, qim/gateway/read_sync.py)."""
    logged = Q(sent_at_ms__gte=now - RECENT_S * 1000, sent_at_ms__lte=now - SETTLE_MS)
    done = Recovered(recalls=recover_recalls(logged), edits=recover_edits(logged))
    if done.recalls or done.edits:
        logger.warning("periodic recovery finished interrupted control events: %s", done.report())
    return done


_startup: asyncio.Task[None] | None = None


async def _recover_then_sweep() -> None:
    from qim.gateway.read_sync import get_read_sync_flusher

    try:
        await in_db_thread(run_recovery_pass)()
    except Exception:
        # Serve anyway: what is left stays findable for the next pass (qim_recover).
        logger.exception("startup recovery pass failed")
    get_read_sync_flusher().start_sweeping()
    if settings.QIM_RECOVERY_INTERVAL_S > 0:
        periodic = every(
            lambda: settings.QIM_RECOVERY_INTERVAL_S, lambda: in_db_thread(recover_recent)(now_ms()),
            log=logger, failed="periodic recovery pass failed; retrying",
        )
        spawn(periodic, name="qim-periodic-recovery")


async def ensure_recovered() -> None:
    """Run the startup pass once per process; every caller waits until it is over."""
    global _startup
    if _startup is None:
        _startup = asyncio.create_task(_recover_then_sweep(), name="qim-startup-recovery")
    if not _startup.done():
        await asyncio.shield(_startup)


class RecoverOnStart:
    """ASGI application: nothing is served (HTTP or WebSocket) before the startup pass is over,
    so a restarted node never shows a half-finished recall; then each scope type goes to its
    route, a callable that returns the awaitable serving the scope. Once the pass is over this
    is a plain call that returns the route's own awaitable, and routes are plain calls too
    (qim/gateway/routing.py), so no frame stays above the consumer for a socket's life: one
    coroutine fewer per connection for the collector to walk
    (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths")."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes

    @markcoroutinefunction  # an ASGI 3 application to servers that ask (uvicorn's detection)
    def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[Any]:
        route = self.routes.get(scope["type"])
        if route is None or _startup is None or not _startup.done():
            return self._after_recovery(scope, receive, send)
        return route(scope, receive, send)

    async def _after_recovery(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        await ensure_recovered()
        route = self.routes.get(scope["type"])
        if route is None:
            raise ValueError("No application configured for scope type %r" % scope["type"])
        return await route(scope, receive, send)
