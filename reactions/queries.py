"""Reaction summaries for a page of messages: one query for the page, not one per message."""

from __future__ import annotations

from reactions.models import MessageReactionSummary


def summaries_for(conversation_id: str, seqs: list[int]) -> dict[int, dict]:
    """conversation_seq -> {counts, summary_version}, for the seqs that have reactions."""
    if not seqs:
        return {}
    rows = MessageReactionSummary.objects.filter(
        conversation_id=conversation_id, conversation_seq__in=seqs
    ).values_list("conversation_seq", "counts", "summary_version")
    return {seq: {"counts": counts, "summary_version": version} for seq, counts, version in rows if counts}


def attach_summaries(conversation_id: str, messages: list[dict]) -> None:
    """The history page's `reactions` field (protocol.md §5), for the messages that have any;
    registered on qim.hooks.history_rendered."""
    summaries = summaries_for(conversation_id, [m["conversation_seq"] for m in messages])
    for message in messages:
        summary = summaries.get(message["conversation_seq"])
        if summary is not None:
            message["reactions"] = summary
