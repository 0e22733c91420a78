"""What an operator changes of a group in the admin goes through the group actions
(qim.actions.groups), never a raw save: a title, policy or role change is then a qim.group.v1
event every device learns of, one owner is kept (handed over, never dropped), and a new
default tier recomputes the badges of the members it moves. Events need an IM user as their
actor: the tenant's first admin stands in (qim.moderation.operator_stand_in); the admin's own
history (LogEntry) names the operator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qim.actions.groups import do_set_default_tier, do_set_role, do_update_group
from qim.errors import Refused
from qim.models import Conversation, MembershipInterval
from qim.moderation import operator_stand_in

# The group settings do_update_group changes (and logs); default_tier is the operator's own.
LOGGED_SETTINGS = ("title", "mention_all_policy", "add_members_policy")


def stand_in_refusal(tenant_id: int) -> str | None:
    """Why the admin cannot act for this tenant (no admin user to stand in), or None."""
    try:
        operator_stand_in(tenant_id)
    except Refused as refused:
        return refused.message
    return None


def save_group_settings(conversation: Conversation, changed: dict[str, Any]) -> None:
    """Apply the settings an operator changed: the logged ones in one qim.group.v1 event,
    then the default tier. Raises the actions' Refused."""
    logged = {name: value for name, value in changed.items() if name in LOGGED_SETTINGS}
    if logged:
        do_update_group(conversation.pk, operator_stand_in(conversation.tenant_id), "", logged)
    if "default_tier" in changed:
        do_set_default_tier(conversation.pk, changed["default_tier"])


@dataclass
class RoleOutcome:
    """What a role action did: how many memberships changed, and why the others did not."""

    changed: int = 0
    refusals: list[str] = field(default_factory=list)


def set_roles(intervals: Iterable[MembershipInterval], role: str) -> RoleOutcome:
    """Give each (current) membership `role` through do_set_role, one event each; a left
    membership, a direct conversation or a refused change is reported, not raised."""
    outcome = RoleOutcome()
    for interval in intervals:
        if interval.conversation.tenant_id != interval.user.tenant_id:
            # The admin walls memberships by their user's tenant: never act in (nor name)
            # another tenant's group.
            outcome.refusals.append(f"{interval.user.username}: the conversation is another tenant's")
            continue
        where = f"{interval.user.username} in {interval.conversation_id}"
        if interval.left_at is not None:
            outcome.refusals.append(f"{where}: not a current membership")
            continue
        try:
            answer = do_set_role(
                interval.conversation_id, operator_stand_in(interval.conversation.tenant_id), "",
                interval.user.username, role,
            )
        except Refused as refused:
            outcome.refusals.append(f"{where}: {refused.message}")
            continue
        outcome.changed += answer["conversation_seq"] is not None
    return outcome
