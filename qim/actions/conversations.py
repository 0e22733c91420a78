"""Creating conversations and changing who is in them (membership intervals, ADR-0021)."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from qim.actions.log import Appended, append_to_log, lock_conversation
from qim.clock import now_ms
from qim.content_types import MEMBERSHIP, TypePolicy, builtin_policy, rendering_policy
from qim.errors import Refused
from qim.infra import codec
from qim.models import Conversation, MembershipInterval, Tenant, User
from qim.queries.conversations import current_members
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
            creator.tenant_id, title, [u.pk for u in [creator, *members.values()]], e2ee=e2ee
        )
    return conversation, True


def do_create_group(
    tenant_id: int, title: str, member_pks: list[int], *, e2ee: bool = False, batch_size: int | None = None
) -> Conversation:
    """A group with these members, all joined_at = 0: no event is written, so its first SEND
    takes seq 1. The one way a group is made (REST, a promoted room, qim_populate); joins the
    caller's transaction, and trusts the caller to have checked the members' tenant."""
    conversation = Conversation.objects.create(tenant_id=tenant_id, kind=Conversation.GROUP, title=title, e2ee=e2ee)
    MembershipInterval.objects.bulk_create(
        [MembershipInterval(conversation=conversation, user_id=pk, joined_at=0) for pk in member_pks],
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
                tenant_id=creator.tenant_id, kind=Conversation.DIRECT, direct_key=key, e2ee=e2ee
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
    recipients = current_members(conversation.pk)
    recipients.update({u.pk: u.username for u in affected})
    payload = codec.encode({"action": action, "user_ids": [u.username for u in affected]})
    return append_to_log(
        conversation,
        sender=actor,
        sender_device_id=device_id,
        policy=_membership_policy(conversation.tenant_id),
        payload_json=payload,
        recipients=recipients,
        now_ms=now,
        kind="control",
        origin_device_id=device_id or None,
        online=online,
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
        members = current_members(conversation.pk)
        if actor.pk not in members:
            raise Refused("forbidden", "only members add members")
        users = users_by_id(conversation.tenant_id, wanted)
        joining = [u for u in users.values() if u.pk not in members]
        if not joining:
            raise Refused("conflict", "every named user is already a member")
        now = now_ms()
        appended = _log_membership(conversation, actor, device_id, "join", joining, now, online)
        seq = appended.record.conversation_seq
        MembershipInterval.objects.bulk_create(
            [MembershipInterval(conversation=conversation, user=u, joined_at=seq - 1) for u in joining]
        )
    return seq


def do_remove_member(conversation_id: str, actor: User, device_id: str, user_id: str) -> int:
    """Leave (actor is the user) or remove (actor is a tenant admin) at seq J; left_at = J."""
    online = _online_if_counted(actor, conversation_id, [user_id])
    with transaction.atomic():
        conversation = lock_conversation(conversation_id)
        if conversation.kind != Conversation.GROUP:
            raise Refused("forbidden", "direct conversations have fixed members")
        if actor.username != user_id and not actor.is_tenant_admin:
            raise Refused("forbidden", "only the member themself or a tenant admin")
        target = users_by_id(conversation.tenant_id, [user_id])[user_id]
        interval = MembershipInterval.objects.filter(
            conversation=conversation, user=target, left_at__isnull=True
        ).first()
        if interval is None:
            raise Refused("not_found", f"{user_id} is not a member")
        action = "leave" if actor.pk == target.pk else "remove"
        appended = _log_membership(conversation, actor, device_id, action, [target], now_ms(), online)
        interval.left_at = appended.record.conversation_seq
        interval.save(update_fields=["left_at"])
    return appended.record.conversation_seq


def do_populate_group(tenant: Tenant, title: str, usernames: list[str]) -> str:
    """A group of many populated users at once (qim_populate); answers its id."""
    user_pks = []
    for start in range(0, len(usernames), 2000):
        chunk = usernames[start : start + 2000]
        user_pks += list(User.objects.filter(tenant=tenant, username__in=chunk).values_list("pk", flat=True))
    with transaction.atomic():
        conversation = do_create_group(tenant.pk, title, user_pks, batch_size=5000)
    return conversation.pk
