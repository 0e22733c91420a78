"""An EDIT that changes whom a message mentions (issue #34).

The edit event carries the message's new mentions (its `mentions` and `mention_all`
columns; null `mentions` means the EDIT left them alone), written in step 1 with the event,
so recovery re-applies them with the payload (design §2). Step 2 rewrites the target's
MessageMention rows: mention_count (qim.queries.unread) follows at once, up for the newly
mentioned and down for the dropped; the badge pushes carry is recomputed for them; the newly
mentioned get one high-priority push (an @all added by an edit notifies no one again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qim.actions.log_pushes import push_payload
from qim.actions.mailbox import enqueue_offline_pushes, push_capable_devices
from qim.actions.read_sync import store_badge
from qim.conf import limit
from qim.errors import Refused
from qim.infra import codec
from qim.models import Conversation, MembershipInterval, MessageMention, MessageRecord, PushTask, User, UserBadgeState
from qim.queries.online import NOT_ASKED, OnlineDevices
from qim.render import message_object


@dataclass(frozen=True)
class Readdressed:
    """A message's mentions after an EDIT: user pk -> user id in the order sent, @all, and
    who of them is new (not the editor)."""

    named: dict[int, str]
    mention_all: bool
    added: dict[int, str]

    def carried(self) -> tuple[str, bool]:
        """The `mentions` JSON (`[]` when the edit names no one: null would mean "left alone")
        and `mention_all` the edit event carries, written with it in step 1."""
        return codec.encode(list(self.named.values())), self.mention_all


def readdress(
    conversation: Conversation, target: MessageRecord, editor: User,
    mentions: Sequence[str] | None, mention_all: bool | None,
) -> Readdressed | None:
    """The mentions an EDIT asks for, checked as SEND checks them (current members, at most
    max_mentions_per_message, @all by the group's policy); None when it asks for no change.
    The conversation is locked."""
    if mentions is None and mention_all is None:
        return None
    old = dict(MessageMention.objects.filter(message=target).values_list("user_id", "user__username"))
    wanted = list(dict.fromkeys(mentions)) if mentions is not None else list(old.values())
    most = int(limit("max_mentions_per_message"))
    if len(wanted) > most:
        raise Refused("bad_request", f"at most {most} mentions per message; this one names {len(wanted)}")
    current = dict(
        MembershipInterval.objects.filter(conversation=conversation, left_at__isnull=True, user__username__in=wanted)
        .values_list("user__username", "user_id")
    )
    for user_id in wanted:
        if user_id not in current:
            raise Refused("bad_request", f"cannot mention {user_id}: not a member of this conversation")
    everyone = target.mention_all if mention_all is None else mention_all
    if everyone and not target.mention_all and not _may_mention_all(conversation, editor):
        raise Refused("forbidden", "only the owner and admins may mention everyone in this group")
    named = {current[user_id]: user_id for user_id in wanted}
    added = {pk: uid for pk, uid in named.items() if pk not in old and pk != editor.pk}
    return Readdressed(named, everyone, added)


def _may_mention_all(conversation: Conversation, user: User) -> bool:
    if conversation.mention_all_policy == Conversation.MEMBERS:
        return True
    role = MembershipInterval.objects.filter(
        conversation=conversation, user=user, left_at__isnull=True
    ).values_list("role", flat=True).first()
    return role in (MembershipInterval.OWNER, MembershipInterval.ADMIN)


def same_addresses(event: MessageRecord, readdressed: Readdressed | None) -> bool:
    """Whether a logged edit event carries these mentions (an EDIT retried after a lost ACK)."""
    if readdressed is None:
        return event.mentions is None
    carried = codec.encode(list(readdressed.named.values()))
    return event.mentions == carried and event.mention_all == readdressed.mention_all


def apply_mentions(event: MessageRecord, *, online: OnlineDevices | None = None) -> None:
    """Step 2's part: the target takes the event's mentions (when it carries any) and its
    MessageMention rows are rewritten; badges of the users whose mentions changed are
    recomputed; with `online` (asked before the lock: a live EDIT, not recovery) the newly
    mentioned get their push. Joins the caller's transaction."""
    if event.mentions is None:
        return
    target = MessageRecord.objects.select_related("sender", "conversation").get(
        conversation_id=event.conversation_id, conversation_seq=event.target_conversation_seq
    )
    named = codec.decode(event.mentions) if event.mentions else []
    users = dict(User.objects.filter(tenant_id=target.tenant_id, username__in=named).values_list("username", "pk"))
    new = {users[uid] for uid in named if uid in users}
    old = set(MessageMention.objects.filter(message=target).values_list("user_id", flat=True))
    MessageMention.objects.filter(message=target).exclude(user_id__in=new).delete()
    MessageMention.objects.bulk_create(MessageMention.rows_of(target, sorted(new - old)))
    target.mentions, target.mention_all = (event.mentions if named else None), event.mention_all
    target.save(update_fields=["mentions", "mention_all"])
    changed = (new ^ old) - {target.sender_id}
    for pk in sorted(changed):
        store_badge(pk, event.sent_at_ms)
    if online is not None and online is not NOT_ASKED:
        _push_new_mentions(target, sorted(new - old - {target.sender_id}), online, event.sent_at_ms)


def _push_new_mentions(target: MessageRecord, user_pks: list[int], online: OnlineDevices, now: int) -> int:
    if not user_pks:
        return 0
    devices = push_capable_devices(user_pks)
    ids = dict(User.objects.filter(pk__in=user_pks).values_list("pk", "username"))
    badges = dict(UserBadgeState.objects.filter(user_id__in=user_pks).values_list("user_id", "badge"))
    preview = message_object(target, target.conversation)["preview"]
    payloads = {
        pk: push_payload(target, target.sender.username, preview, badges.get(pk, 0), mention=True) for pk in user_pks
    }
    return enqueue_offline_pushes(
        tenant_id=target.tenant_id, devices=devices,
        online_devices={pk: set(online.get(ids[pk], ())) for pk in user_pks},
        payload_for=payloads, kind=PushTask.MESSAGE, now_ms=now,
    )
