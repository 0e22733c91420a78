"""Reactions: per-user details while a conversation and message are small, the aggregate always
(design §4). Keyed by tenant, conversation and conversation_seq, like the message they are on."""

from __future__ import annotations

from django.db import models

from qim.models import Conversation, Tenant, User


class MessageReactionSummary(models.Model):
    """The aggregate: `counts` (reaction_key -> n, never zero) and a version that grows on
    every change. REACTION_UPDATE and HISTORY_BATCH carry exactly these two."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    conversation_seq = models.PositiveBigIntegerField()
    counts = models.JSONField(default=dict)
    summary_version = models.PositiveBigIntegerField(default=0)
    detail_rows = models.PositiveIntegerField(default=0)
    updated_at_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["conversation", "conversation_seq"], name="one_summary_per_message")
        ]


class MessageReaction(models.Model):
    """Who reacted with what: kept only while the conversation has at most
    reaction_detail_max_members members and the message at most
    reaction_detail_max_per_message details."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    conversation_seq = models.PositiveBigIntegerField()
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    reaction_key = models.CharField(max_length=32)
    created_at_ms = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "conversation_seq", "user", "reaction_key"], name="one_reaction_per_user_key"
            )
        ]


class ReactionFingerprint(models.Model):
    """Idempotency past the detail limits: a 64-bit hash of (user, reaction_key) per message.

    Sixteen bytes a reaction instead of a detail row, and it cannot be read back as "who
    reacted", yet a repeated add or a remove of something absent is still recognised.
    """

    summary = models.ForeignKey(MessageReactionSummary, on_delete=models.CASCADE, related_name="+")
    fingerprint = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["summary", "fingerprint"], name="one_fingerprint_per_summary")
        ]
