"""Creating conversations and changing who is in them (membership intervals, ADR-0021)."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from qim.actions.log import Appended, append_to_log, lock_conversation
from qim.clock import now_ms
from qim.content_types import GROUP, MEMBERSHIP, TypePolicy, builtin_policy, rendering_policy
from qim.errors import Refused
from qim.infra import codec
from qim.models import Conversation, MembershipInterval, Tenant, User
from qim.queries.conversations import MemberSet, current_member_set
from qim.queries.online import NOT_ASKED, OnlineDevices, online_before_lock

MAX_GROUP_MEMBERS_PER_REQUEST = 1000


def users_by_id(tenant_id: int, user_ids: list[str]) -> dict[str, User]:
    """The named users of this tenant; `not_found` naming the first unknown id."""
    found = {u.username: u for u in User.objects.filter(tenant_id=tenant_id, username__in=user_ids)}
    missing = [u for u in user_ids if u not in found]
    if missing:
        raise Refused("not_found", f"no such user: {missing[0]}")
    return found


def _direct_key(a: User, b: User) -> str:
    low, high = sorted((a.pk, b.pk))
    return f"{low}:{high}"


def do_create_conversation(
    creator: User, *, kind: str, title: str, member_user_ids: list[str], e2ee: bool
) -> tuple[Conversation, bool]:
    """Create a group, or find-or-create the direct conversation of a pair.

    Writes no event: initial members get joined_at = 0, so the first SEND takes seq 1.
    Answers (conversation, created). Opens its own transaction.
    """
    wanted = list(dict.fromkeys([u for u in member_user_ids if u != creator.username]))
    if len(wanted) > MAX_GROUP_MEMBERS_PER_REQUEST:
        raise Refused("too_large", f"at most {MAX_GROUP_MEMBERS_PER_REQUEST} members per request")
    members = users_by_id(creator.tenant_id, wanted)
    if kind == Conversation.DIRECT:
        if len(members) != 1:
            raise Refused("bad_request", "a direct conversation has exactly 2 members")
        return _find_or_create_direct(creator, next(iter(members.values())), e2ee)
    with transaction.atomic():
        conversation = do_create_group(
            creator.tenant_id, title, [u.pk for u in [creator, *members.values()]], e2ee=e2ee, owner_pk=creator.pk,
        )
    return conversation, True


def do_create_group(
    tenant_id: int, title: str, member_pks: list[int], *, e2ee: bool = False, batch_size: int | None = None,
    owner_pk: int | None = None,
) -> Conversation:
    """A group with these members, all joined_at = 0: no event is written, so its first SEND
    takes seq 1. The one way a group is made (REST, a promoted room, qim_populate); joins the
    caller's transaction, and trusts the caller to have checked the members' tenant.
    `owner_pk` (the creator) is its owner; without one the first member is."""
    member_pks = list(dict.fromkeys(member_pks))
    owner = owner_pk if owner_pk in member_pks else (member_pks[0] if member_pks else None)
    conversation = Conversation.objects.create(
        tenant_id=tenant_id, kind=Conversation.GROUP, title=title, e2ee=e2ee, member_count=len(member_pks),
    )
    MembershipInterval.objects.bulk_create(
        [
            MembershipInterval(
                conversation=conversation, user_id=pk, joined_at=0,
                role=MembershipInterval.OWNER if pk == owner else MembershipInterval.MEMBER,
            )
            for pk in member_pks
        ],
        batch_size=batch_size,
    )
    return conversation


def _find_or_create_direct(creator: User, other: User, e2ee: bool) -> tuple[Conversation, bool]:
    key = _direct_key(creator, other)
    existing = Conversation.objects.filter(tenant_id=creator.tenant_id, direct_key=key).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            conversation = Conversation.objects.create(
                tenant_id=creator.tenant_id, kind=Conversation.DIRECT, direct_key=key, e2ee=e2ee, member_count=2,
            )
            MembershipInterval.objects.bulk_create(
                [MembershipInterval(conversation=conversation, user=u, joined_at=0) for u in (creator, other)]
            )
    except IntegrityError:
        # The pair raced us to it: theirs is the one.
        return Conversation.objects.get(tenant_id=creator.tenant_id, direct_key=key), False
    return conversation, True


def _online_if_counted(actor: User, conversation_id: str, also: list[str]) -> OnlineDevices:
    """Who is connected, asked before the lock (qim.queries.online), when the tenant's
    membership events count (protocol.md §6); nobody is asked otherwise."""
    if not _membership_policy(actor.tenant_id).counts_unread:
        return NOT_ASKED
    return online_before_lock(actor.tenant_id, conversation_id, also=also)


def _membership_policy(tenant_id: int) -> TypePolicy:
    # The tenant's registry row decides (an admin may make joins count, protocol.md §6).
    return rendering_policy(tenant_id, MEMBERSHIP) or builtin_policy(MEMBERSHIP)


def _log_membership(
    conversation: Conversation, actor: User, device_id: str, action: str, affected: list[User], now: int,
    online: OnlineDevices,
) -> Appended:
    """The qim.membership.v1 event at seq J; everyone who is a member at J is told, and so are
    the affected users (a leaver's interval ends at J, but their clients must learn of it).
    The acting device (the REST token's) is not: the event names it as its origin, and the
    REST answer already told it (protocol.md §5)."""
    payload = codec.encode({"action": action, "user_ids": [u.username for u in affected]})
    return log_group_event(
        conversation, actor, device_id, _membership_policy(conversation.tenant_id), payload, affected, now, online,
    )


def log_group_event(
    conversation: Conversation, actor: User, device_id: str, policy: TypePolicy, payload_json: str,
    affected: list[User], now: int, online: OnlineDevices = NOT_ASKED,
) -> Appended:
    """A CONTROL event of the group (membership, role, policy, title) at the next seq: in
    the mailbox of every `full` member, the actor and the affected users (a leaver's interval
    ends here, but their clients must learn of it); `mention_only` members get it live
    (design §4.3). The acting device (the REST token's) is not told: the event names it as
    its origin, and the REST answer already told it (protocol.md §5)."""
    members = current_member_set(conversation)
    recipients, live = members.split({actor.pk, *(u.pk for u in affected)})
    recipients.update({u.pk: u.username for u in affected})
    return append_to_log(
        conversation,
        sender=actor,
        sender_device_id=device_id,
        policy=policy,
        payload_json=payload_json,
        recipients=recipients,
        now_ms=now,
        kind="control",
        origin_device_id=device_id or None,
        online=online,
        quiet=members.quiet & frozenset(recipients),
        live=live,
    )


def do_add_members(conversation_id: str, actor: User, device_id: str, user_ids: list[str]) -> int:
    """Join users to a group at seq J (joined_at = J - 1); answers J. The actor must be a
    member; users already in are refused as `conflict` when nobody new is left."""
    wanted = list(dict.fromkeys(user_ids))
    if not wanted or len(wanted) > MAX_GROUP_MEMBERS_PER_REQUEST:
        raise Refused("bad_request", f"name 1 to {MAX_GROUP_MEMBERS_PER_REQUEST} users")
    online = _online_if_counted(actor, conversation_id, wanted)
    with transaction.atomic():
        conversation = lock_conversation(conversation_id)
        if conversation.kind != Conversation.GROUP:
            raise Refused("forbidden", "direct conversations have fixed members")
        members = current_member_set(conversation)
        if actor.pk not in members.ids:
            raise Refused("forbidden", "only members add members")
        if conversation.add_members_policy == Conversation.ADMINS and not members.may_manage(actor.pk):
            raise Refused("forbidden", "only the owner and admins add members to this group")
        users = users_by_id(conversation.tenant_id, wanted)
        joining = [u for u in users.values() if u.pk not in members.ids]
        if not joining:
            raise Refused("conflict", "every named user is already a member")
        now = now_ms()
        appended = _log_membership(conversation, actor, device_id, "join", joining, now, online)
        seq = appended.record.conversation_seq
        MembershipInterval.objects.bulk_create(
            [MembershipInterval(conversation=conversation, user=u, joined_at=seq - 1) for u in joining]
        )
        _count_members(conversation)
    return seq


def _count_members(conversation: Conversation) -> None:
    """member_count after a join or leave (the lock is held): what decides the default tier."""
    conversation.member_count = MembershipInterval.objects.filter(conversation=conversation, left_at__isnull=True).count()
    conversation.members_version += 1
    conversation.save(update_fields=["member_count", "members_version"])


def do_remove_member(conversation_id: str, actor: User, device_id: str, user_id: str) -> int:
    """Leave (actor is the user) or remove at seq J; left_at = J. The owner removes anyone,
    an admin removes members (not the owner or other admins), a tenant admin anyone. An
    owner who leaves hands ownership to the longest-standing admin, else member (a
    qim.group.v1 event right after the leave)."""
    online = _online_if_counted(actor, conversation_id, [user_id])
    with transaction.atomic():
        conversation = lock_conversation(conversation_id)
        if conversation.kind != Conversation.GROUP:
            raise Refused("forbidden", "direct conversations have fixed members")
        members = current_member_set(conversation)
        target = users_by_id(conversation.tenant_id, [user_id])[user_id]
        if actor.pk != target.pk and not _may_remove(actor, members, target.pk):
            raise Refused("forbidden", "only the member themself, the group's owner or admins, or a tenant admin")
        interval = MembershipInterval.objects.filter(
            conversation=conversation, user=target, left_at__isnull=True
        ).first()
        if interval is None:
            raise Refused("not_found", f"{user_id} is not a member")
        action = "leave" if actor.pk == target.pk else "remove"
        now = now_ms()
        appended = _log_membership(conversation, actor, device_id, action, [target], now, online)
        interval.left_at = appended.record.conversation_seq
        interval.save(update_fields=["left_at"])
        _count_members(conversation)
        if interval.role == MembershipInterval.OWNER:
            hand_ownership_on(conversation, actor, device_id, now)
    return appended.record.conversation_seq


def apply_roles(conversation: Conversation, actor: User, device_id: str, changes: dict[int, str], now: int) -> int:
    """Give members new roles (user pk -> role; the lock is held) and log the qim.group.v1
    event that says so."""
    users = {u.pk: u for u in User.objects.filter(pk__in=list(changes))}
    for pk, role in changes.items():
        MembershipInterval.objects.filter(conversation=conversation, user_id=pk, left_at__isnull=True).update(role=role)
    body = {"action": "role", "roles": {users[pk].username: role for pk, role in changes.items()}}
    appended = log_group_event(
        conversation, actor, device_id, group_policy(conversation.tenant_id), codec.encode(body),
        list(users.values()), now,
    )
    return appended.record.conversation_seq


def hand_ownership_on(conversation: Conversation, actor: User, device_id: str, now: int) -> int | None:
    """After the owner left: the longest-standing admin, else member, becomes the owner
    (the lock is held). Answers the event's seq, or None when nobody is left."""
    current = MembershipInterval.objects.filter(conversation=conversation, left_at__isnull=True)
    heir = (
        current.filter(role=MembershipInterval.ADMIN).order_by("joined_at", "pk").first()
        or current.order_by("joined_at", "pk").first()
    )
    if heir is None:
        return None
    return apply_roles(conversation, actor, device_id, {heir.user_id: MembershipInterval.OWNER}, now)


def group_policy(tenant_id: int) -> TypePolicy:
    # The tenant's registry row decides, as for membership events.
    return rendering_policy(tenant_id, GROUP) or builtin_policy(GROUP)


def _may_remove(actor: User, members: MemberSet, target_pk: int) -> bool:
    if actor.is_tenant_admin:
        return True
    role, target_role = members.roles.get(actor.pk), members.roles.get(target_pk)
    if role == MembershipInterval.OWNER:
        return True
    return role == MembershipInterval.ADMIN and target_role == MembershipInterval.MEMBER


def do_populate_group(tenant: Tenant, title: str, usernames: list[str], *, default_tier: str = "") -> str:
    """A group of many populated users at once (qim_populate); answers its id."""
    user_pks = []
    for start in range(0, len(usernames), 2000):
        chunk = usernames[start : start + 2000]
        user_pks += list(User.objects.filter(tenant=tenant, username__in=chunk).values_list("pk", flat=True))
    with transaction.atomic():
        conversation = do_create_group(tenant.pk, title, user_pks, batch_size=5000)
        if default_tier:
            conversation.default_tier = default_tier
            conversation.save(update_fields=["default_tier"])
    return conversation.pk
