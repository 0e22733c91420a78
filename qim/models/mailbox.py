"""The per-user mailbox (write diffusion), badges, and the offline push outbox."""

from __future__ import annotations

from django.db import models

from qim.models.accounts import Device, Tenant, User
from qim.models.conversations import Conversation, MessageRecord


class UserMailboxEntry(models.Model):
    """One event in one user's mailbox, numbered by mailbox_seq; each device syncs by cursor.

    Message entries point at their MessageRecord (rendered in its current state at read time);
    mailbox-only control events (qim.read.v1) carry their body in `control`. An entry whose
    origin_device_id is the reading device is never delivered to it.
    """

    MESSAGE = "message"
    CONTROL = "control"

    # The one write path (qim/actions/mailbox.py write_mailbox_entries) takes the user ids
    # from rows its callers read in the same transaction (memberships, the reader's own row)
    # and the conversation and message likewise, so the database re-checks nothing: no FK
    # constraints (PostgreSQL checked four per row at commit, a third of a SEND to 1 000
    # members), and no index the reads do not use (they go by (user, mailbox_seq) and by
    # message). Deletes still cascade: Django does that itself.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, db_constraint=False, db_index=False)
    user = models.ForeignKey(
        User, on_delete=models.CASCADE, related_name="mailbox", db_constraint=False, db_index=False
    )
    mailbox_seq = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=8)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    message = models.ForeignKey(
        MessageRecord, on_delete=models.CASCADE, null=True, blank=True, related_name="+", db_constraint=False
    )
    control = models.JSONField(null=True, blank=True)
    origin_device_id = models.CharField(max_length=64, null=True, blank=True)
    created_at_ms = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "mailbox_seq"], name="mailbox_seq_unique_per_user")
        ]
        verbose_name_plural = "user mailbox entries"


class UserMailboxHead(models.Model):
    """The last mailbox_seq given to a user: allocated under this row's lock, inside the
    transaction that writes the entries (qim/actions/mailbox.py), so mailbox order is commit
    order (never a gap a SYNC cursor could skip past).

    A narrow row of its own rather than a column of User: every message to a group moves one
    per member, and PostgreSQL rewrites this row in place (fillfactor 50, no indexed column
    changes) where the wide user row cost three times as much (docs/performance.md,
    "Batched, set-based SEND on PostgreSQL"). Made on a user's first entry."""

    user = models.OneToOneField(
        User, on_delete=models.CASCADE, primary_key=True, related_name="mailbox_head", db_constraint=False
    )
    mailbox_head = models.PositiveBigIntegerField(default=0)


class UserBadgeState(models.Model):
    """The badge number that message pushes carry: unread messages across conversations."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, primary_key=True, related_name="badge_state")
    badge = models.PositiveIntegerField(default=0)
    updated_at_ms = models.BigIntegerField(default=0)


class PushTask(models.Model):
    """The offline push outbox: one row per (offline device, counted message), drained by
    `qim_push_worker`. A sent task stays as `sent`, a task out of attempts as `failed`, so
    nothing is lost silently; a running worker deletes them QIM_PUSH_TASK_RETENTION_S (7 days)
    after they were last due, never a pending one."""

    MESSAGE = "message"
    VOIP = "voip"
    PENDING, SENT, FAILED = "pending", "sent", "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="push_tasks")
    kind = models.CharField(max_length=8, default=MESSAGE)
    payload = models.JSONField()
    state = models.CharField(max_length=8, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    available_at_ms = models.BigIntegerField()
    # A claim is a lease: a worker that dies mid-send loses it when claimed_until_ms passes.
    claimed_by = models.CharField(max_length=64, blank=True)
    claimed_until_ms = models.BigIntegerField(default=0)
    created_at_ms = models.BigIntegerField()
    sent_at_ms = models.BigIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "available_at_ms"])]
