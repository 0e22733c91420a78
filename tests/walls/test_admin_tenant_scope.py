"""Tenant walls in the admin (in process): an operator in the group `tenant:acme` sees acme's
rows only, in lists, detail pages, filters and actions; globex's rows answer like missing
ones. A superuser still sees every tenant."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.models import User as Operator
from django.test import Client

from qim.actions.accounts import do_bootstrap_tenant
from qim.actions.conversations import do_populate_group
from qim.models import MembershipInterval, PushTask, User

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenants() -> dict[str, User]:
    """Each tenant's admin, in a group of its own named after the tenant."""
    admins = {name: do_bootstrap_tenant(name, f"{name}-boss", "pw").admin for name in ("acme", "globex")}
    for name, boss in admins.items():
        do_populate_group(boss.tenant, f"{name}-room", [boss.username])
    return admins


@pytest.fixture
def acme_operator() -> Client:
    """Staff with every QIM permission, scoped to acme by its group."""
    operator = Operator.objects.create_user("acme-op", "op@example.com", "pw", is_staff=True)
    operator.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["qim", "rooms", "registry"]))
    group, _ = Group.objects.get_or_create(name="tenant:acme")
    operator.groups.add(group)
    client = Client()
    assert client.login(username="acme-op", password="pw")
    return client


def body(page) -> str:  # type: ignore[no-untyped-def]
    assert page.status_code == 200, page.status_code
    return page.content.decode()


def test_a_scoped_operator_sees_only_their_tenants_rows_and_tenant_names(acme_operator: Client, tenants: dict) -> None:
    for path in ("/admin/qim/user/", "/admin/qim/conversation/", "/admin/qim/membershipinterval/",
                 "/admin/qim/tenant/", "/admin/qim/device/"):
        page = body(acme_operator.get(path))
        assert "acme" in page and "globex" not in page, path  # nor in the tenant filter's choices


def test_another_tenants_row_answers_like_a_missing_one(acme_operator: Client, tenants: dict) -> None:
    theirs, mine = tenants["globex"], tenants["acme"]
    assert acme_operator.get(f"/admin/qim/user/{mine.pk}/change/").status_code == 200
    missing = acme_operator.get("/admin/qim/user/999999/change/")
    hidden = acme_operator.get(f"/admin/qim/user/{theirs.pk}/change/")
    assert (hidden.status_code, hidden["Location"]) == (missing.status_code, missing["Location"]) == (302, "/admin/")
    conversation = theirs.intervals.get().conversation_id
    assert acme_operator.get(f"/admin/qim/conversation/{conversation}/change/").status_code == 302


def test_an_action_on_another_tenants_row_does_nothing(acme_operator: Client, tenants: dict) -> None:
    theirs = tenants["globex"]
    acme_operator.post("/admin/qim/user/", {"action": "deactivate_selected", "_selected_action": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.is_active
    device = theirs.devices.get()
    task = PushTask.objects.create(tenant=theirs.tenant, user=theirs, device=device, payload={}, state=PushTask.FAILED,
                                   available_at_ms=1, created_at_ms=1)
    acme_operator.post("/admin/qim/pushtask/", {"action": "retry_selected", "_selected_action": [task.pk]})
    assert PushTask.objects.get(pk=task.pk).state == PushTask.FAILED


def test_a_scoped_operator_cannot_attach_a_row_to_another_tenant_or_make_tenants(acme_operator: Client, tenants: dict) -> None:
    page = acme_operator.post("/admin/qim/user/add/", {"tenant": tenants["globex"].tenant_id, "username": "mole",
                                                       "display_name": "", "devices-TOTAL_FORMS": "0",
                                                       "devices-INITIAL_FORMS": "0"})
    assert page.status_code == 200 and "Select a valid choice" in page.content.decode()
    assert not User.objects.filter(username="mole").exists()
    assert acme_operator.get("/admin/qim/tenant/add/").status_code == 403


def test_a_delete_that_would_reach_another_tenants_rows_names_their_kind_only_and_is_refused(
    acme_operator: Client, tenants: dict
) -> None:
    """No action makes such a row (acme's user in globex's conversation): made by hand, to
    prove that a cascade across the wall shows nothing of globex and deletes nothing."""
    mine, theirs = tenants["acme"], tenants["globex"]
    stray = MembershipInterval.objects.create(conversation_id=theirs.intervals.get().conversation_id, user=mine,
                                              joined_at=0)
    page = body(acme_operator.get(f"/admin/qim/user/{mine.pk}/delete/"))
    assert "membership interval" in page and "globex" not in page
    assert f"/admin/qim/membershipinterval/{stray.pk}/" not in page and str(stray) not in page
    assert acme_operator.post(f"/admin/qim/user/{mine.pk}/delete/", {"post": "yes"}).status_code == 403
    assert User.objects.filter(pk=mine.pk).exists() and MembershipInterval.objects.filter(pk=stray.pk).exists()


def test_a_superuser_still_sees_every_tenant(operator_client: Client, tenants: dict) -> None:
    page = body(operator_client.get("/admin/qim/conversation/"))
    assert "acme-room" in page and "globex-room" in page


def test_a_scoped_operator_cannot_manage_operators_or_groups_even_with_auth_permissions(tenants: dict) -> None:
    """Otherwise it could add itself to `tenant:globex` (or edit another operator) and walk
    through the wall: Django's User and Group admins answer 403 to tenant-scoped staff."""
    operator = Operator.objects.create_user("acme-op2", "op2@example.com", "pw", is_staff=True)
    operator.user_permissions.set(Permission.objects.filter(content_type__app_label="auth"))
    operator.groups.add(Group.objects.get_or_create(name="tenant:acme")[0])
    globex, _ = Group.objects.get_or_create(name="tenant:globex")
    client = Client()
    assert client.login(username="acme-op2", password="pw")
    for path in ("/admin/auth/user/", f"/admin/auth/user/{operator.pk}/change/", "/admin/auth/group/",
                 f"/admin/auth/group/{globex.pk}/change/", "/admin/auth/group/add/"):
        assert client.get(path).status_code == 403, path
    client.post(f"/admin/auth/user/{operator.pk}/change/", {"username": "acme-op2", "groups": [globex.pk]})
    assert not operator.groups.filter(name="tenant:globex").exists()
    assert "/admin/auth/" not in body(client.get("/admin/"))


def test_an_unscoped_operator_with_auth_permissions_still_manages_operators(tenants: dict) -> None:
    operator = Operator.objects.create_user("root-op", "root@example.com", "pw", is_staff=True)
    operator.user_permissions.set(Permission.objects.filter(content_type__app_label="auth"))
    client = Client()
    assert client.login(username="root-op", password="pw")
    assert "acme-op2" not in body(client.get("/admin/auth/user/")) and "root-op" in body(client.get("/admin/auth/user/"))
    assert client.get("/admin/auth/group/").status_code == 200


def test_group_settings_and_role_actions_never_reach_another_tenants_group(acme_operator: Client, tenants: dict) -> None:
    mine, theirs = tenants["acme"], tenants["globex"]
    conversation = theirs.intervals.get().conversation
    settings = {"title": "mole", "mention_all_policy": "members", "add_members_policy": "members", "default_tier": ""}
    hidden = acme_operator.post(f"/admin/qim/conversation/{conversation.pk}/change/", settings)
    missing = acme_operator.post("/admin/qim/conversation/01NOSUCHCONVERSATION000000/change/", settings)
    assert (hidden.status_code, hidden["Location"]) == (missing.status_code, missing["Location"])
    # A stray membership (acme's user in globex's group: no action makes one, see above) is
    # inside acme's wall, which goes by the user; its group's roles are still not acme's.
    stray = MembershipInterval.objects.create(conversation=conversation, user=mine, joined_at=0)
    page = acme_operator.post("/admin/qim/membershipinterval/",
                              {"action": "make_admins", "_selected_action": [stray.pk]}, follow=True)
    assert "the conversation is another tenant&#x27;s" in body(page)
    conversation.refresh_from_db()
    assert conversation.title == "globex-room" and conversation.last_seq == 0
    assert MembershipInterval.objects.get(pk=stray.pk).role == MembershipInterval.MEMBER
