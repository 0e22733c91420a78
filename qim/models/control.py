"""Control-event bookkeeping: read syncs waiting for their merge window, and the moderation audit."""

from __future__ import annotations

from django.db import models

from qim.models.accounts import Tenant, User
from qim.models.conversations import Conversation


class PendingReadSync(models.Model):
    """A qim.read.v1 event not yet written: the newest position of one user in one conversation
    inside its read_sync_merge_window (design §2: only the last read event of a window is
    written). Written in the MARK_READ transaction, so a node that dies inside the window
    leaves it here for whoever flushes next (a timer, the sweep, or a restarted node)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    read_conversation_seq = models.PositiveBigIntegerField()
    # The device that marked this position: the event is never delivered back to it.
    origin_device_id = models.CharField(max_length=64)
    # When the window that the first mark opened closes (trailing edge: written then, once).
    due_at_ms = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "conversation"], name="one_pending_read_sync")
        ]
        indexes = [models.Index(fields=["due_at_ms"])]


class ModerationAudit(models.Model):
    """One moderation act, written in the transaction of the act itself; never edited.

    `actor` describes who acted in words that outlive accounts ("user:admin" for a tenant admin
    over REST, "operator:jo" for the Django admin); ids are kept as values, not foreign keys,
    so the trail survives the rows it names."""

    RECALL = "recall"
    RECALLED, ALREADY_RECALLED = "recalled", "already_recalled"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=16)
    outcome = models.CharField(max_length=24)
    conversation_id = models.CharField(max_length=26)
    conversation_seq = models.PositiveBigIntegerField()
    message_id = models.CharField(max_length=26)
    event_conversation_seq = models.PositiveBigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    at_ms = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "at_ms"])]

    def __str__(self) -> str:
        return f"{self.action} {self.conversation_id}#{self.conversation_seq} by {self.actor}"
