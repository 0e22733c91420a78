"""Running a group (issue #34): roles, the group's policies and title, and each member's
mailbox tier.

Roles: the owner (the creator) does everything; admins rename the group, add and remove
members and set its policies; members may leave, and add members while the group's
`add_members_policy` is `members`. Only the owner makes or unmakes admins and hands
ownership over. A tenant admin (an operator) may do what an owner does. Every role, policy
or title change is a qim.group.v1 CONTROL event in the log, so every device learns of it,
offline ones by SYNC. A tier is the member's own choice and changes only their mailbox: it
writes no event; so does the operator's default tier for those who chose none.
"""

from __future__ import annotations

from django.db import transaction

from qim.actions.conversations import apply_roles, group_policy, log_group_event, users_by_id
from qim.actions.log import lock_conversation
from qim.actions.read_sync import store_badge
from qim.clock import now_ms
from qim.errors import Refused
from qim.infra import codec
from qim.models import Conversation, MembershipInterval, User
from qim.queries.conversations import MemberSet, current_member_set, group_default_tier
from qim.queries.groups import group_settings

ROLES = (MembershipInterval.OWNER, MembershipInterval.ADMIN, MembershipInterval.MEMBER)
TIERS = (MembershipInterval.FULL, MembershipInterval.MENTION_ONLY)
POLICIES = (Conversation.ADMINS, Conversation.MEMBERS)
MAX_TITLE = 200


def _lock_group(conversation_id: str) -> tuple[Conversation, MemberSet]:
    conversation = lock_conversation(conversation_id)
    if conversation.kind != Conversation.GROUP:
        raise Refused("forbidden", "direct conversations have no roles or policies")
    return conversation, current_member_set(conversation)


def _is_owner(actor: User, members: MemberSet) -> bool:
    return actor.is_tenant_admin or members.roles.get(actor.pk) == MembershipInterval.OWNER


def _log(conversation: Conversation, actor: User, device_id: str, body: dict, affected: list[User], now: int) -> int:
    appended = log_group_event(
        conversation, actor, device_id, group_policy(conversation.tenant_id), codec.encode(body), affected, now,
    )
    return appended.record.conversation_seq


def do_set_role(conversation_id: str, actor: User, device_id: str, user_id: str, role: str) -> dict:
    """Make a member an admin or a member again (the owner only), or hand ownership to them
    (`owner`: the owner becomes an admin). Answers {user_id, role, conversation_seq} (the
    event's seq; null when nothing changed)."""
    if role not in ROLES:
        raise Refused("bad_request", f"role is one of {', '.join(ROLES)}")
    with transaction.atomic():
        conversation, members = _lock_group(conversation_id)
        if not _is_owner(actor, members):
            raise Refused("forbidden", "only the group's owner changes roles")
        target = users_by_id(conversation.tenant_id, [user_id])[user_id]
        if target.pk not in members.ids:
            raise Refused("not_found", f"{user_id} is not a member")
        if members.roles[target.pk] == role:
            return {"user_id": user_id, "role": role, "conversation_seq": None}
        changes = {target.pk: role}
        if role == MembershipInterval.OWNER:
            for pk, held in members.roles.items():
                if held == MembershipInterval.OWNER:
                    changes[pk] = MembershipInterval.ADMIN
        elif members.roles[target.pk] == MembershipInterval.OWNER:
            raise Refused("conflict", "hand ownership to another member first")
        seq = apply_roles(conversation, actor, device_id, changes, now_ms())
    return {"user_id": user_id, "role": role, "conversation_seq": seq}


def do_set_tier(conversation_id: str, actor: User, user_id: str, tier: str) -> dict:
    """The member's own mailbox tier (design §4.3), online: unread is counted from the log,
    so switching loses nothing; the badge pushes carry is recomputed. Answers {user_id, tier}."""
    if tier not in TIERS:
        raise Refused("bad_request", f"tier is one of {', '.join(TIERS)}")
    with transaction.atomic():
        conversation = lock_conversation(conversation_id)
        if user_id != actor.username:
            raise Refused("forbidden", "a member chooses their own tier")
        interval = MembershipInterval.objects.filter(
            conversation=conversation, user=actor, left_at__isnull=True
        ).first()
        if interval is None:
            raise Refused("forbidden", "you are not a member of this conversation")
        target = actor
        interval.tier = tier
        interval.save(update_fields=["tier"])
        store_badge(target.pk, now_ms())
    return {"user_id": user_id, "tier": tier}


def do_set_default_tier(conversation_id: str, tier: str) -> int:
    """The operator's default tier of a group, for members who chose none ("" = by size,
    design §4.3). Like a member's own switch it writes no event; the badges pushes carry of
    the members it moves are recomputed after the change commits, one transaction each
    (store_badge locks the badge row first, so a message committing meanwhile adds on top).
    Answers how many members it moved."""
    if tier not in ("", *TIERS):
        raise Refused("bad_request", f"default tier is one of {', '.join(TIERS)}, or blank (by size)")
    with transaction.atomic():
        conversation, _ = _lock_group(conversation_id)
        before = group_default_tier(conversation)
        conversation.default_tier = tier
        conversation.save(update_fields=["default_tier"])
        if group_default_tier(conversation) == before:
            return 0
        moved = list(
            MembershipInterval.objects.filter(conversation=conversation, left_at__isnull=True, tier="")
            .values_list("user_id", flat=True)
        )
    now = now_ms()
    for user_pk in moved:
        with transaction.atomic():
            store_badge(user_pk, now)
    return len(moved)


def do_update_group(conversation_id: str, actor: User, device_id: str, changes: dict) -> dict:
    """Rename the group or set its policies (owner and admins). Answers the group's settings
    and the event's seq (null when nothing changed)."""
    for name in ("mention_all_policy", "add_members_policy"):
        if name in changes and changes[name] not in POLICIES:
            raise Refused("bad_request", f"{name} is one of {', '.join(POLICIES)}")
    if "title" in changes and (not isinstance(changes["title"], str) or len(changes["title"]) > MAX_TITLE):
        raise Refused("bad_request", f"title is a string of at most {MAX_TITLE} characters")
    with transaction.atomic():
        conversation, members = _lock_group(conversation_id)
        if actor.pk not in members.ids and not actor.is_tenant_admin:
            raise Refused("forbidden", "you are not a member of this conversation")
        if not (actor.is_tenant_admin or members.may_manage(actor.pk)):
            raise Refused("forbidden", "only the group's owner and admins change it")
        changed = {name: value for name, value in changes.items() if getattr(conversation, name) != value}
        seq = None
        if changed:
            for name, value in changed.items():
                setattr(conversation, name, value)
            conversation.save(update_fields=list(changed))
            seq = _log(conversation, actor, device_id, {"action": "update", "changes": changed}, [], now_ms())
    return {**group_settings(conversation), "conversation_seq": seq}
