"""A group in the operators' admin (Django test client, in process): its settings saved
through the group actions (events logged, badges recomputed), roles changed by the
membership list's actions through do_set_role, mentions shown read-only on a message."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from qim.actions.conversations import do_create_conversation
from qim.actions.messages import SendRequest, do_send_messages
from qim.content_types import TEXT, builtin_policy
from qim.infra import codec
from qim.models import Conversation, MembershipInterval, MessageRecord, User, UserBadgeState, UserMailboxEntry
from tests.control.personas_in_process import Cast, make_cast, send_text

pytestmark = pytest.mark.django_db

SETTINGS = {"title": "team", "mention_all_policy": "admins", "add_members_policy": "members", "default_tier": ""}


def change_page(conversation: Conversation) -> str:
    return f"/admin/qim/conversation/{conversation.pk}/change/"


def group_events(conversation: Conversation) -> list[MessageRecord]:
    return list(MessageRecord.objects.filter(conversation=conversation, content_type="qim.group.v1")
                .order_by("conversation_seq"))


def interval(cast: Cast, user: User) -> MembershipInterval:
    return MembershipInterval.objects.get(conversation=cast.group, user=user, left_at__isnull=True)


def act(client: Client, action: str, *intervals: MembershipInterval) -> str:
    answer = client.post("/admin/qim/membershipinterval/",
                         {"action": action, "_selected_action": [i.pk for i in intervals]}, follow=True)
    assert answer.status_code == 200
    return answer.content.decode()


def test_the_conversation_page_shows_the_group_and_its_members_roles_and_tiers(operator_client: Client) -> None:
    cast = make_cast()
    page = operator_client.get(change_page(cast.group)).content.decode()
    for shown in ("Group settings", 'name="mention_all_policy"', 'name="add_members_policy"', 'name="default_tier"',
                  "Member count", "<td>alice</td><td>owner</td><td>full (group default)</td>",
                  "<td>bob</td><td>member</td>", "change roles"):
        assert shown in page, shown
    assert 'name="member_count"' not in page and 'name="last_seq"' not in page  # read-only
    assert operator_client.get("/admin/qim/conversation/add/").status_code == 403
    assert operator_client.post(f"/admin/qim/conversation/{cast.group.pk}/delete/", {"post": "yes"}).status_code == 403


def test_saving_group_settings_logs_one_group_event_through_the_actions(operator_client: Client) -> None:
    cast = make_cast()
    changed = {**SETTINGS, "title": "Ops", "mention_all_policy": "members", "add_members_policy": "admins"}
    assert operator_client.post(change_page(cast.group), changed).status_code == 302
    cast.group.refresh_from_db()
    assert (cast.group.title, cast.group.mention_all_policy, cast.group.add_members_policy) == ("Ops", "members", "admins")
    [event] = group_events(cast.group)
    assert (event.conversation_seq, event.sender_id, event.kind) == (1, cast.admin.pk, MessageRecord.CONTROL)
    assert json.loads(event.payload) == {"action": "update", "changes": {
        "title": "Ops", "mention_all_policy": "members", "add_members_policy": "admins"}}
    assert set(UserMailboxEntry.objects.filter(message=event).values_list("user__username", flat=True)) >= {
        "alice", "bob"}
    assert operator_client.post(change_page(cast.group), changed).status_code == 302  # nothing changed
    assert len(group_events(cast.group)) == 1


def test_a_default_tier_writes_no_event_and_recomputes_the_badges_it_moves(operator_client: Client) -> None:
    cast = make_cast()
    for text in ("one", "two"):
        send_text(cast.alice, cast.group, text)
    assert UserBadgeState.objects.get(user=cast.bob).badge == 2
    assert operator_client.post(change_page(cast.group), {**SETTINGS, "default_tier": "mention_only"}).status_code == 302
    cast.group.refresh_from_db()
    assert cast.group.default_tier == "mention_only" and group_events(cast.group) == []
    assert UserBadgeState.objects.get(user=cast.bob).badge == 0  # mention_only: unread mentions only
    assert operator_client.post(change_page(cast.group), SETTINGS).status_code == 302  # back to "by size"
    assert UserBadgeState.objects.get(user=cast.bob).badge == 2


def test_a_tenant_without_an_admin_to_act_as_is_refused_before_anything_is_saved(operator_client: Client) -> None:
    cast = make_cast()
    User.objects.filter(pk=cast.admin.pk).update(is_tenant_admin=False)
    answer = operator_client.post(change_page(cast.group), {**SETTINGS, "title": "Ops"})
    assert answer.status_code == 200 and "this tenant has no admin user to act as" in answer.content.decode()
    cast.group.refresh_from_db()
    assert cast.group.title == "team" and group_events(cast.group) == []


def test_a_direct_conversation_is_read_only(operator_client: Client) -> None:
    cast = make_cast()
    direct, _ = do_create_conversation(cast.alice, kind="direct", title="", member_user_ids=["bob"], e2ee=False)
    page = operator_client.get(change_page(direct)).content.decode()
    assert 'name="mention_all_policy"' not in page and 'name="_save"' not in page
    assert operator_client.post(change_page(direct), {**SETTINGS, "title": "x"}).status_code == 403


def test_roles_change_by_actions_through_do_set_role(operator_client: Client) -> None:
    cast = make_cast()
    listing = operator_client.get("/admin/qim/membershipinterval/?role=owner").content.decode()
    assert "alice" in listing and ">bob<" not in listing and "full (group default)" in listing
    assert "Hand ownership of the group to the selected member" in listing

    assert "1 role(s) changed to admin." in act(operator_client, "make_admins", interval(cast, cast.bob))
    [event] = group_events(cast.group)
    assert (json.loads(event.payload), event.sender_id) == ({"action": "role", "roles": {"bob": "admin"}}, cast.admin.pk)
    page = act(operator_client, "make_members", interval(cast, cast.alice))  # the owner is never dropped
    assert "hand ownership to another member first" in page and interval(cast, cast.alice).role == "owner"
    page = act(operator_client, "hand_ownership", interval(cast, cast.alice), interval(cast, cast.bob))
    assert "Select exactly one member" in page and len(group_events(cast.group)) == 1
    act(operator_client, "hand_ownership", interval(cast, cast.bob))
    assert (interval(cast, cast.bob).role, interval(cast, cast.alice).role) == ("owner", "admin")
    assert json.loads(group_events(cast.group)[-1].payload) == {
        "action": "role", "roles": {"bob": "owner", "alice": "admin"}}


def test_a_role_action_on_a_left_membership_or_a_direct_conversation_changes_nothing(operator_client: Client) -> None:
    cast = make_cast()
    left = interval(cast, cast.bob)
    MembershipInterval.objects.filter(pk=left.pk).update(left_at=5)
    direct, _ = do_create_conversation(cast.alice, kind="direct", title="", member_user_ids=["bob"], e2ee=False)
    in_direct = MembershipInterval.objects.get(conversation=direct, user=cast.alice)
    page = act(operator_client, "make_admins", left, in_direct)
    assert "not a current membership" in page and "direct conversations have no roles" in page
    assert "0 role(s) changed" in page and MessageRecord.objects.filter(content_type="qim.group.v1").count() == 0


def test_a_message_shows_whom_it_mentions_read_only(operator_client: Client) -> None:
    cast = make_cast()
    request = SendRequest(cast.alice, "phone", "mention-1", builtin_policy(TEXT), codec.encode({"text": "@bob"}),
                          mentions=("bob",))
    [ack] = do_send_messages(cast.group.pk, [request])
    message = MessageRecord.objects.get(message_id=ack.message_id)
    page = operator_client.get(f"/admin/qim/messagerecord/{message.pk}/change/").content.decode()
    assert "Mentions (what mention_count counts)" in page and "@bob" in page
    assert "mention_rows-TOTAL_FORMS" in page and 'name="mention_rows-0-user"' not in page  # nothing editable
