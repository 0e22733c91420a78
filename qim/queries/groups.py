"""Reads of a group's settings and members (REST GET conversations/{id}[/members])."""

from __future__ import annotations

from typing import Any

from qim.models import Conversation, MembershipInterval
from qim.queries.conversations import access_member_intervals
from qim.queries.unread import tier_of


def group_settings(conversation: Conversation) -> dict[str, Any]:
    """What every member may read of a conversation's settings (PATCH answers it too)."""
    return {
        "conversation_id": conversation.pk,
        "kind": conversation.kind,
        "title": conversation.title,
        "mention_all_policy": conversation.mention_all_policy,
        "add_members_policy": conversation.add_members_policy,
        "member_count": conversation.member_count,
    }


def conversation_settings(conversation: Conversation, user_pk: int) -> dict[str, Any]:
    """The settings every member may read, with the reader's own role and tier; `forbidden`
    for someone who never was a member (as HISTORY answers them)."""
    intervals = access_member_intervals(conversation, user_pk)
    last = intervals[-1]
    last.conversation = conversation
    return {
        **group_settings(conversation),
        "role": last.role,
        "tier": tier_of(last),
        "member": last.left_at is None,
    }


def member_page(conversation: Conversation, user_pk: int, *, after: str | None, limit: int) -> dict[str, Any]:
    """Current members ordered by user id, after `after` (exclusive), with their roles (a
    member's tier is theirs alone and is not listed). For members and former members."""
    access_member_intervals(conversation, user_pk)
    rows = MembershipInterval.objects.filter(conversation=conversation, left_at__isnull=True)
    if after:
        rows = rows.filter(user__username__gt=after)
    page = list(
        rows.order_by("user__username").values_list("user__username", "user__display_name", "role")[: limit + 1]
    )
    members = [{"user_id": uid, "display_name": name, "role": role} for uid, name, role in page[:limit]]
    return {"members": members, "next": members[-1]["user_id"] if len(page) > limit else None}
