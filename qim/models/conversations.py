"""Conversations, membership intervals, the commit log (MessageRecord) and read cursors."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models
from ulid import ULID

from qim.models.accounts import Tenant, User


def new_ulid() -> str:
    return str(ULID())


class Conversation(models.Model):
    """A direct (unique per pair) or group conversation: the unit of conversation_seq."""

    DIRECT = "direct"
    GROUP = "group"
    KINDS = [(DIRECT, "direct"), (GROUP, "group")]

    id = models.CharField(max_length=26, primary_key=True, default=new_ulid)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="conversations")
    kind = models.CharField(max_length=8, choices=KINDS)
    title = models.CharField(max_length=200, blank=True)
    e2ee = models.BooleanField(default=False)
    # "<lower user pk>:<higher user pk>" for direct conversations: the pair's uniqueness.
    direct_key = models.CharField(max_length=64, null=True, blank=True)
    # The seq allocator: the next message takes last_seq + 1 under this row's lock.
    last_seq = models.PositiveBigIntegerField(default=0)
    # The list projection: the last affects_session_order message (anchor_target events never
    # move it, design §2).
    last_activity_seq = models.PositiveBigIntegerField(default=0)
    last_activity_ms = models.BigIntegerField(default=0)
    # The log's running count of counts_unread rows, as of the head (MessageRecord.counted_total
    # of the last row): unread is a difference of two such counts, never a count of rows.
    counted_total = models.PositiveBigIntegerField(default=0)
    # Current members: the size that decides a group's default tier (QIM_LARGE_GROUP_MEMBERS).
    member_count = models.PositiveIntegerField(default=0)
    # Grows with every join and leave: nodes keep a large group's member ids for live pushes
    # and read them again when a push names another version (qim/node/conversation_push.py).
    members_version = models.PositiveBigIntegerField(default=0)
    # Who may @all and who may add members (owner and admins always may).
    ADMINS, MEMBERS = "admins", "members"
    POLICIES = [(ADMINS, "owner and admins"), (MEMBERS, "every member")]
    mention_all_policy = models.CharField(max_length=8, choices=POLICIES, default=ADMINS)
    add_members_policy = models.CharField(max_length=8, choices=POLICIES, default=MEMBERS)
    # The tier of members who chose none: blank = by size (mention_only above
    # QIM_LARGE_GROUP_MEMBERS members, full below); the operator may fix it in the admin.
    default_tier = models.CharField(
        max_length=12, blank=True, default="",
        choices=[("", "by size"), ("full", "full"), ("mention_only", "mention_only")],
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "direct_key"], name="direct_unique_per_pair",
                condition=models.Q(direct_key__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.title or self.id}"


class MembershipInterval(models.Model):
    """One stretch of membership (ADR-0021): the user sees seqs joined_at < seq < left_at.

    Initial members have joined_at = 0; a join at seq J opens joined_at = J - 1; a leave or
    remove at J closes left_at = J. A rejoin opens a new row. left_at null means still a member.
    """

    OWNER, ADMIN, MEMBER = "owner", "admin", "member"
    ROLES = [(OWNER, "owner"), (ADMIN, "admin"), (MEMBER, "member")]
    FULL, MENTION_ONLY = "full", "mention_only"
    TIERS = [(FULL, "full"), (MENTION_ONLY, "mention_only")]

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="intervals")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="intervals")
    joined_at = models.PositiveBigIntegerField()
    left_at = models.PositiveBigIntegerField(null=True, blank=True)
    # The member's role while this interval lasts (a rejoin starts as a member again).
    role = models.CharField(max_length=8, choices=ROLES, default=MEMBER)
    # The member's own choice of mailbox tier (design §4.3); blank follows the group's default.
    tier = models.CharField(max_length=12, choices=TIERS, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["conversation", "left_at"]),
            models.Index(fields=["user", "conversation"]),
            # A SEND to a large group reads only its current members who chose a tier (the
            # `full` ones get entries), not all of them (qim/actions/log.py).
            models.Index(
                fields=["conversation", "tier"], name="chosen_tiers",
                condition=models.Q(left_at__isnull=True) & ~models.Q(tier=""),
            ),
        ]

    def covers(self, seq: int) -> bool:
        return self.span_covers(self.joined_at, self.left_at, seq)

    @staticmethod
    def span_covers(joined_at: int, left_at: int | None, seq: int) -> bool:
        """covers() for an interval read as values, not as a model instance."""
        return joined_at < seq and (left_at is None or seq < left_at)


class MessageRecord(models.Model):
    """A persistent message or control event of a conversation: the commit log's row.

    The type's delivery flags are copied from the registry when the row is written, so unread
    and ordering are plain SQL and a later registry edit does not rewrite the past.
    """

    MESSAGE = "message"
    CONTROL = "control"
    NORMAL, EDITED, RECALLED, DELETED = "normal", "edited", "recalled", "deleted"
    STATES = [(s, s) for s in (NORMAL, EDITED, RECALLED, DELETED)]

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    conversation_seq = models.PositiveBigIntegerField()
    message_id = models.CharField(max_length=26, unique=True, default=new_ulid)
    kind = models.CharField(max_length=8, default=MESSAGE)
    sender = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    sender_device_id = models.CharField(max_length=64, blank=True)
    client_msg_id = models.CharField(max_length=64, null=True, blank=True)
    content_type = models.CharField(max_length=128)
    # Compact JSON text exactly as sent: the server never parses a payload (E2EE).
    payload = models.TextField(null=True, blank=True)
    sent_at_ms = models.BigIntegerField()
    state = models.CharField(max_length=8, choices=STATES, default=NORMAL)
    edited_at_ms = models.BigIntegerField(null=True, blank=True)
    # Set when this row's qim.recall.v1 event is in the log (design §2: log first, then this);
    # still null beside a logged recall event means step 2 is to be redone by recovery.
    recall_event_conversation_seq = models.PositiveBigIntegerField(null=True, blank=True)
    # The seq of the qim.edit.v1 event whose payload this row holds: recovery re-applies an
    # edit event newer than this (the edit's own "log first, then state", design §2).
    edit_event_conversation_seq = models.PositiveBigIntegerField(null=True, blank=True)
    # Control events that anchor on another row (recall, edit) name it here.
    target_conversation_seq = models.PositiveBigIntegerField(null=True, blank=True)
    counts_unread = models.BooleanField(default=True)
    affects_session_order = models.BooleanField(default=True)
    timeline_visible = models.BooleanField(default=True)
    # Running counts for definitional unread without counting rows (issue #34): counts_unread
    # rows of the conversation with seq <= this one, and of those the ones this row's sender
    # wrote. Unread in (s, e] is a difference of each, less the recalled rows in between.
    counted_total = models.PositiveBigIntegerField(default=0)
    sender_counted_total = models.PositiveBigIntegerField(default=0)
    # Mentions as sent: user ids (JSON list, compact) and @all; the per-user rows that count
    # them are MessageMention's.
    mentions = models.TextField(null=True, blank=True)
    mention_all = models.BooleanField(default=False)
    # The conversation_seq this message replies to.
    reply_to_seq = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["conversation", "conversation_seq"], name="seq_unique_per_conversation"),
            models.UniqueConstraint(
                fields=["sender", "client_msg_id"], name="client_msg_id_unique_per_user",
                condition=models.Q(client_msg_id__isnull=False),
            ),
        ]
        indexes = [
            # Recall/edit events by target: the "already recalled?" check under the lock and the
            # recovery pass read only these rows, never the whole log.
            models.Index(
                fields=["conversation", "target_conversation_seq"], name="anchor_events",
                condition=models.Q(target_conversation_seq__isnull=False),
            ),
            # The same rows by time: each node's periodic recovery pass reads the last minutes'.
            models.Index(
                fields=["sent_at_ms"], name="anchor_events_by_time",
                condition=models.Q(target_conversation_seq__isnull=False),
            ),
            # A sender's rows in seq order: their running count at any position (unread).
            models.Index(fields=["conversation", "sender", "conversation_seq"], name="sender_rows"),
            # The few rows unread must subtract (recalled, tombstoned) and @all rows.
            models.Index(
                fields=["conversation", "conversation_seq"], name="uncounted_rows",
                condition=models.Q(state__in=["recalled", "deleted"]),
            ),
            models.Index(
                fields=["conversation", "conversation_seq"], name="mention_all_rows",
                condition=models.Q(mention_all=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id}#{self.conversation_seq} {self.content_type}"


class ReadCursor(models.Model):
    """How far a user has read a conversation; only ever moves forward (design §2)."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="read_cursors")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    read_conversation_seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "conversation"], name="one_cursor_per_user_conversation")
        ]


class MessageMention(models.Model):
    """One user mentioned by one message: what mention_count counts (an EDIT rewrites them)."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    message = models.ForeignKey(MessageRecord, on_delete=models.CASCADE, related_name="mention_rows")
    conversation_seq = models.PositiveBigIntegerField()
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+", db_constraint=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "user"], name="one_mention_per_message_user")
        ]
        indexes = [models.Index(fields=["user", "conversation", "conversation_seq"], name="mentions_of_user")]

    @classmethod
    def rows_of(cls, message: MessageRecord, user_pks: Iterable[int]) -> list[MessageMention]:
        """Unsaved rows naming `user_pks` in `message` (SEND and an EDIT's step 2 write them)."""
        return [
            cls(conversation_id=message.conversation_id, message_id=message.pk,
                conversation_seq=message.conversation_seq, user_id=pk)
            for pk in user_pks
        ]

    def __str__(self) -> str:
        return f"@{self.user.username}"
