"""REACT batches: the REACTs to one message that arrive while its transaction runs go
together into the next one (qim/gateway/batching.py; docs/performance.md, "REACT batching")."""

from __future__ import annotations

from collections.abc import Sequence

from qim.infra.background import spawn
from qim.gateway.batching import KeyedBatcher
from qim.errors import Refused
from qim.queries.conversations import access_conversation
from reactions.actions import ReactOutcome, ReactRequest, do_react_batch
from reactions.pusher import get_pusher

BatchKey = tuple[int, str, int]  # (tenant pk, conversation_id, conversation_seq)
Answer = ReactOutcome | Refused


def apply_react_batch(key: BatchKey, requests: list[ReactRequest]) -> list[Answer]:
    """The one sync function a batch runs in its DB thread. Tenant walls: the key carries the
    reactors' tenant, so another tenant's conversation id answers `not_found` to all of them."""
    tenant_id, conversation_id, seq = key
    try:
        conversation = access_conversation(tenant_id, conversation_id)
    except Refused as refused:
        return [Refused(refused.code, refused.message) for _ in requests]
    return do_react_batch(conversation, seq, requests)


def push_last_change(key: BatchKey, answers: Sequence[Answer]) -> None:
    """Committed: one REACTION_UPDATE hand-off per batch, with its final state. Pushes merge
    per window anyway (absolute counts), and the ACKs do not wait for the fan-out: the push
    runs as a `spawn`ed task (kept alive until it ends, its failure logged)."""
    changed = [a for a in answers if isinstance(a, ReactOutcome) and a.changed]
    if not changed:
        return
    last = changed[-1]
    spawn(
        get_pusher().changed(key[0], last.conversation_id, last.conversation_seq, last.counts, last.summary_version),
        name=f"qim-reaction-push-{last.conversation_id}",
    )


# Per process. Across nodes, batches to one message serialize on the summary's row lock;
# 500 bounds one transaction (its lock hold and its statements' parameters).
_batcher: KeyedBatcher[BatchKey, ReactRequest, ReactOutcome] | None = None


def get_batcher() -> KeyedBatcher[BatchKey, ReactRequest, ReactOutcome]:
    global _batcher
    if _batcher is None:
        _batcher = KeyedBatcher("react", apply_react_batch, max_items=500, after_batch=push_last_change)
    return _batcher
