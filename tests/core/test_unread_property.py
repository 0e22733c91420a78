"""Unread, mention_count and badges from running counts (qim/queries/unread.py) against a
brute-force recount from the log, after every step of random interleavings of sends of
counting and non-counting types (with mentions and @all), recalls, edits that change
mentions, joins, leaves, rejoins, reads on several devices and tier switches (issue #34).
tests/core/test_unread_property_postgres.py runs this file again on PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from qim.actions.accounts import do_bootstrap_tenant, do_create_user
from qim.actions.conversations import do_add_members, do_create_conversation, do_remove_member
from qim.actions.edit import check_edit_message
from qim.actions.groups import do_set_tier, do_update_group
from qim.actions.messages import SendRequest, do_send_messages
from qim.actions.read_sync import check_mark_read
from qim.actions.recall import check_recall_message
from qim.clock import now_ms
from qim.content_types import OWN_SEQ, PERSISTENT, TEXT, TypePolicy, builtin_policy
from qim.errors import Refused
from qim.infra import codec
from qim.models import Conversation, MembershipInterval, MessageRecord, ReadCursor, User, UserBadgeState
from qim.queries.conversation_list import conversation_page
from qim.queries.conversations import group_default_tier

pytestmark = pytest.mark.django_db

NAMES = ["alice", "bob", "carol", "dave"]
# A registered type that does not count as unread (design §3: unread is type-level).
NOTE = TypePolicy(
    content_type="acme.note", delivery_class=PERSISTENT, counts_unread=False, affects_session_order=True,
    timeline_visible=True, anchor_mode=OWN_SEQ, preview_template="[note]", max_payload_bytes=4096,
)


class Rollback(Exception):
    """Raised at the end of an example: its writes go, the next example starts clean."""


@dataclass
class World:
    users: list[User]
    conversations: list[Conversation]
    sent: list[tuple[int, int, int]] = field(default_factory=list)  # (conversation index, seq, sender index)
    counter: int = 0
    # The operator changed the group's default tier: stored badges of members who follow it
    # are exact again only at their next MARK_READ or tier switch (docs/protocol.md §14).
    default_changed: bool = False


def build_world() -> World:
    boot = do_bootstrap_tenant("acme", "admin", "pw")
    users = [do_create_user(boot.tenant, name, "pw") for name in NAMES]
    group, _ = do_create_conversation(users[0], kind="group", title="g", member_user_ids=NAMES[1:3], e2ee=False)
    do_update_group(group.pk, users[0], "phone", {"mention_all_policy": "members"})
    direct, _ = do_create_conversation(users[0], kind="direct", title="", member_user_ids=["bob"], e2ee=False)
    return World(users, [group, direct])


# One step: (kind, a, b, c, d) with small integers the step reads as it needs.
steps = st.tuples(
    st.sampled_from(["send", "send", "send", "note", "recall", "edit", "join", "leave", "read", "tier", "default"]),
    st.integers(0, 3), st.integers(0, 1), st.integers(0, 15), st.booleans(),
)


def run_step(world: World, step: tuple) -> None:
    kind, who, where, pick, flag = step
    user, conversation = world.users[who], world.conversations[where]
    try:
        if kind in ("send", "note"):
            world.counter += 1
            mentions = tuple(NAMES[i] for i in range(4) if pick & (1 << i) and i != who)
            request = SendRequest(
                user, f"dev{pick % 2}", f"p{world.counter}", builtin_policy(TEXT) if kind == "send" else NOTE,
                codec.encode({"text": f"m{world.counter}"}), mentions=mentions, mention_all=flag and where == 0,
            )
            [ack] = do_send_messages(conversation.pk, [request])
            if not isinstance(ack, Refused):
                world.sent.append((where, ack.conversation_seq, who))
        elif kind == "recall" and world.sent:
            where, seq, sender = world.sent[pick % len(world.sent)]
            check_recall_message(world.users[sender], "dev0", world.conversations[where].pk, seq)
        elif kind == "edit" and world.sent:
            where, seq, sender = world.sent[pick % len(world.sent)]
            mentions = [NAMES[i] for i in range(4) if (pick >> 1) & (1 << i) and i != sender]
            check_edit_message(
                world.users[sender], "dev0", world.conversations[where].pk, seq, {"text": "edited"},
                mentions=mentions, mention_all=flag if where == 0 else None,
            )
        elif kind == "join":
            do_add_members(world.conversations[0].pk, world.users[0], "dev0", [NAMES[who]])
        elif kind == "leave" and who != 0:
            do_remove_member(world.conversations[0].pk, user, "dev0", NAMES[who])
        elif kind == "read":
            head = Conversation.objects.get(pk=conversation.pk).last_seq
            with transaction.atomic():
                check_mark_read(user, f"dev{pick % 2}", conversation, head * (pick % 5) // 4, now_ms())
        elif kind == "tier":
            do_set_tier(conversation.pk, user, NAMES[who], "mention_only" if flag else "full")
        elif kind == "default":  # the operator's setting: SENDs read only some members then
            Conversation.objects.filter(pk=world.conversations[0].pk).update(default_tier="mention_only" if flag else "")
            world.default_changed = True
    except Refused:
        pass  # a step the state does not allow (a non-member, a closed window): no effect


def brute_force(user: User, conversation: Conversation) -> tuple[int, int] | None:
    """(unread, mention_count) counted row by row from the log, or None for a stranger."""
    intervals = list(MembershipInterval.objects.filter(conversation=conversation, user=user))
    if not intervals:
        return None
    cursor = ReadCursor.objects.filter(conversation=conversation, user=user).first()
    read = cursor.read_conversation_seq if cursor else 0
    unread = mentions = 0
    for row in MessageRecord.objects.filter(conversation=conversation, conversation_seq__gt=read):
        visible = any(i.covers(row.conversation_seq) for i in intervals)
        if not visible or row.sender_id == user.pk or row.state in ("recalled", "deleted"):
            continue
        unread += row.counts_unread
        named = json.loads(row.mentions) if row.mentions else []
        mentions += row.kind == "message" and (row.mention_all or user.username in named)
    return unread, mentions


def check(world: World) -> None:
    for user in world.users:
        page = conversation_page(user, max_bytes=1 << 40)
        listed = {item["conversation_id"]: item for item in page.items}
        expected_badge = expected_push_badge = 0
        for conversation in world.conversations:
            counts = brute_force(user, conversation)
            if counts is None:
                assert conversation.pk not in listed
                continue
            item = listed[conversation.pk]
            assert (item["unread"], item["mention_count"]) == counts, (user.username, conversation.kind, item)
            last = MembershipInterval.objects.filter(conversation=conversation, user=user).order_by("-joined_at").first()
            tier = last.tier or group_default_tier(Conversation.objects.get(pk=conversation.pk))
            assert item["tier"] == tier
            expected_badge += counts[0]
            expected_push_badge += counts[1] if tier == "mention_only" else counts[0]
        assert page.badge == expected_badge, user.username
        if not world.default_changed:
            stored = UserBadgeState.objects.filter(user=user).values_list("badge", flat=True).first() or 0
            assert stored == expected_push_badge, (user.username, stored, expected_push_badge)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(steps, min_size=1, max_size=24))
def test_unread_mentions_and_badges_match_a_recount_after_every_step(program: list[tuple]) -> None:
    try:
        with transaction.atomic():
            world = build_world()
            for step in program:
                note(f"step {step}")
                run_step(world, step)
                check(world)
            raise Rollback
    except Rollback:
        pass
