"""Retention's share of reactions: the details, aggregates and fingerprints of purged messages."""

from __future__ import annotations

from collections import Counter

from django.db import transaction
from django.db.models import QuerySet

from reactions.models import MessageReaction, MessageReactionSummary


def purge_reactions(conversation_id: str, below_seq: int, batch: int, dry_run: bool) -> dict[str, int]:
    """Delete the reactions on seqs below `below_seq` of one conversation, a batch per
    transaction (a summary takes its fingerprints along). Called by qim/ops/retention.py after the
    log rows went, so a REACT racing it finds no message and writes nothing new here."""
    deleted: Counter[str] = Counter()
    for rows in (
        MessageReaction.objects.filter(conversation_id=conversation_id, conversation_seq__lt=below_seq),
        MessageReactionSummary.objects.filter(conversation_id=conversation_id, conversation_seq__lt=below_seq),
    ):
        deleted.update(_delete(rows, batch, dry_run))
    return +deleted


def _delete(rows: QuerySet, batch: int, dry_run: bool) -> Counter[str]:  # type: ignore[type-arg]
    label = rows.model._meta.label
    if dry_run:
        return Counter({label: rows.count()})
    deleted: Counter[str] = Counter()
    while True:
        with transaction.atomic():
            pks = list(rows.order_by("conversation_seq").values_list("pk", flat=True)[:batch])
            if pks:
                deleted.update(rows.model.objects.filter(pk__in=pks).delete()[1])
        if len(pks) < batch:
            return deleted
