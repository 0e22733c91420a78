"""Core models: tenants and accounts, conversations and their log, the mailbox and pushes,
control-event bookkeeping."""

from qim.models.accounts import Device, DeviceToken, Tenant, User, new_token_key, token_digest
from qim.models.credentials import CredentialsGeneration
from qim.models.control import ModerationAudit, PendingReadSync
from qim.models.conversations import (
    Conversation,
    MembershipInterval,
    MessageMention,
    MessageRecord,
    ReadCursor,
    new_ulid,
)
from qim.models.mailbox import PushTask, UserBadgeState, UserMailboxEntry, UserMailboxHead

__all__ = [
    "Conversation",
    "CredentialsGeneration",
    "Device",
    "DeviceToken",
    "MembershipInterval",
    "MessageMention",
    "MessageRecord",
    "ModerationAudit",
    "PendingReadSync",
    "PushTask",
    "ReadCursor",
    "Tenant",
    "User",
    "UserBadgeState",
    "UserMailboxEntry",
    "UserMailboxHead",
    "new_token_key",
    "token_digest",
    "new_ulid",
]
