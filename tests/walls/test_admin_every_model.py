"""Tenant walls in the admin, for every registered model admin of every app (in process).

acme and globex each get a real row of every model (made by the project's actions). An
operator in the group `tenant:acme` holding EVERY Django permission signs in, and for each
model admin finds nothing of globex: not in the list (nor its filters), not on a change,
delete, history or view-on-site page (globex's id answers exactly like a missing one), not
through the autocomplete of any of the model's relations, not through a changelist action,
and no form accepts globex's tenant, user or conversation. Django's own User and Group admins answer
403 to such an operator. A new admin that is not walled fails the first test."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.models import User as Operator
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model, QuerySet
from django.forms import ModelChoiceField
from django.test import Client, RequestFactory
from django.urls import reverse

from qim.actions.accounts import do_bootstrap_tenant, do_create_user, do_issue_token
from qim.actions.conversations import do_create_conversation
from qim.admin.base import ReadOnlyAdmin
from qim.admin.operators import UnscopedOnly
from qim.admin.tenants import TenantWall, TenantWallAdmin, tenant_path_of
from qim.models import PushTask, Tenant
from qim.moderation import ModerationService, Moderator
from push_providers.actions import do_generate_vapid
from reactions.actions import ReactRequest, do_react_batch
from registry.actions import do_create_type
from rooms.actions import do_create_room
from rtc.actions import do_record_call, take_voip_quota
from rtc.calls import ENDED, MISSED, Call
from tests.control.personas_in_process import send_text

pytestmark = pytest.mark.django_db
MINE, THEIRS = "acme", "globex"
MISSING = "999999"
# Installation-wide admins: for unscoped operators only (every permission False to a scoped one).
INSTALLATION_ONLY = {Operator: "auth.user", Group: "auth.group"}
LABELS = sorted(model._meta.label_lower for model in admin.site._registry)


def populate(name: str) -> None:
    """A row of every registered model for this tenant, each made the way the server makes it."""
    boot = do_bootstrap_tenant(name, f"{name}-boss", "pw")  # tenant, user, device, builtin types
    tenant, boss = boot.tenant, boot.admin
    alice = do_create_user(tenant, f"{name}-alice", "pw")
    do_issue_token(alice, f"{name}-phone")
    device = alice.devices.get()
    group, _ = do_create_conversation(alice, kind="group", title=f"{name}-team", member_user_ids=[boss.username],
                                      e2ee=False)  # conversation, membership intervals
    hello = send_text(alice, group, f"{name} says hello")  # message records, mailbox entries, badges
    spam = send_text(alice, group, f"{name} spam")
    ModerationService().recall(Moderator.operator(tenant.pk, f"{name}-op"), group.pk, spam, reason="test")  # audit
    do_react_batch(group, hello, [ReactRequest(boss.pk, "+1", "add")])  # reaction, summary
    PushTask.objects.create(tenant=tenant, user=alice, device=device, payload={}, state=PushTask.FAILED,
                            available_at_ms=1, created_at_ms=1)
    do_create_room(alice, f"{name}-lobby", f"{name} lobby")
    do_create_type(tenant, {"custom_type": f"{name}.card.v1", "delivery_class": "persistent"}, "test")  # + change
    do_record_call(Call(tenant_id=tenant.pk, call_id=f"{name}-call", conversation_id=group.pk, caller_id=alice.username,
                        caller_device_id=device.device_id, callee_id=boss.username, state=ENDED, created_at_ms=1,
                        ring_deadline_ms=2, ended_at_ms=3, outcome=MISSED))
    take_voip_quota(device.pk, date(2026, 12, 5), 5)
    do_generate_vapid(tenant, "mailto:ops@example.com")
    group_of_operators, _ = Group.objects.get_or_create(name=f"tenant:{name}")
    Operator.objects.create_user(f"{name}-op", is_staff=True).groups.add(group_of_operators)


def tenant_rows(model: type[Model], name: str) -> QuerySet:
    """The tenant's rows of `model`; none for a model with no route to a tenant."""
    path = tenant_path_of(model)
    rows = model._default_manager.order_by("pk")
    return rows.none() if path is None else rows.filter(**{path: Tenant.objects.get(name=name).pk})


def row_of(model: type[Model], name: str) -> Model:
    """The tenant's first row of `model` (its operator or group for Django's own models)."""
    if model is Operator:
        return Operator.objects.get(username=f"{name}-op")
    if model is Group:
        return Group.objects.get(name=f"tenant:{name}")
    return tenant_rows(model, name).first()


def rows_of(model: type[Model], name: str) -> set[str]:
    return {str(pk) for pk in tenant_rows(model, name).values_list("pk", flat=True)}


@pytest.fixture
def world() -> None:
    for name in (MINE, THEIRS):
        populate(name)


@pytest.fixture
def scoped() -> tuple[Client, Operator]:
    """Staff in `tenant:acme` holding every permission of every app."""
    operator = Operator.objects.create_user("walled-op", is_staff=True)
    operator.user_permissions.set(Permission.objects.all())
    operator.groups.add(Group.objects.get_or_create(name=f"tenant:{MINE}")[0])
    client = Client()
    client.force_login(operator)
    return client, Operator.objects.get(pk=operator.pk)


def request_as(operator: Operator) -> Any:
    request = RequestFactory().get("/admin/")
    request.user = operator
    return request


def url(obj: Model, view: str) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_{view}", args=[quote(obj.pk)])


def page(client: Client, path: str) -> str:
    answer = client.get(path)
    assert answer.status_code == 200, (path, answer.status_code)
    return answer.content.decode()


def test_every_registered_admin_is_walled_or_installation_only() -> None:
    """The structural wall: a new ModelAdmin (or inline) of any app that does not inherit the
    wall fails here, before it can show anything of another tenant."""
    for model, model_admin in admin.site._registry.items():
        if model in INSTALLATION_ONLY:
            assert isinstance(model_admin, UnscopedOnly), model
            continue
        assert isinstance(model_admin, TenantWallAdmin), f"{model._meta.label}: admin is not a TenantWallAdmin"
        assert model_admin.tenant_path is not None, f"{model._meta.label}: no route to a tenant"
        for inline in model_admin.inlines:
            assert issubclass(inline, TenantWall), f"{model._meta.label}: inline {inline.__name__} is not walled"
    assert set(LABELS) == {m._meta.label_lower for m in admin.site._registry}


@pytest.mark.parametrize("label", LABELS)
def test_a_scoped_operator_with_every_permission_finds_nothing_of_another_tenant(
    label: str, world: None, scoped: tuple[Client, Operator]
) -> None:
    client, operator = scoped
    model = apps.get_model(label)
    mine, theirs = row_of(model, MINE), row_of(model, THEIRS)
    assert mine is not None and theirs is not None, f"no {label} row to test with"
    opts = model._meta
    changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    if model in INSTALLATION_ONLY:
        for path in (changelist, url(mine, "change"), url(theirs, "change"), url(theirs, "delete"),
                     url(theirs, "history")):
            assert client.get(path).status_code == 403, path
        assert f"/admin/{opts.app_label}/" not in page(client, "/admin/")
    else:
        listing = page(client, changelist)
        assert url(mine, "change") in listing
        assert url(theirs, "change") not in listing and THEIRS not in listing  # nor in a filter's choices
        assert THEIRS not in page(client, url(mine, "change"))  # related choices, inlines
        for view in ("change", "delete", "history"):
            expected = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[MISSING]))
            hidden = client.get(url(theirs, view))
            # A missing row: Django's "does not exist" redirect (403 first where the admin never deletes).
            assert expected.status_code in (302, 403), (view, expected.status_code)
            answers = [(answer.status_code, answer.get("Location")) for answer in (hidden, expected)]
            assert answers[0] == answers[1], view
        shortcut = f"/admin/r/{ContentType.objects.get_for_model(model).pk}/"  # "view on site"
        hidden, expected = client.get(f"{shortcut}{quote(theirs.pk)}/"), client.get(f"{shortcut}{MISSING}/")
        assert (hidden.status_code, hidden.content) == (expected.status_code, expected.content)

    model_admin = admin.site._registry[model]
    request = request_as(operator)
    assert not any(check(request, theirs) for check in (model_admin.has_view_permission,
                                                        model_admin.has_change_permission,
                                                        model_admin.has_delete_permission))
    assert model_admin.has_view_permission(request, mine) is (model not in INSTALLATION_ONLY)
    for field in opts.get_fields():
        if not (field.is_relation and field.concrete):
            continue
        answer = client.get("/admin/autocomplete/",
                            {"app_label": opts.app_label, "model_name": opts.model_name, "field_name": field.name})
        if answer.status_code != 200:  # the related model has no admin, no search, or refuses this operator
            assert answer.status_code in (403, 404), (field.name, answer.status_code)
            continue
        found = {result["id"] for result in answer.json()["results"]}
        assert found and not found & rows_of(field.related_model, THEIRS), field.name

    before = list(model._default_manager.filter(pk=theirs.pk).values())
    actions = {*model_admin.get_actions(request), "delete_selected"}
    for action in actions:
        client.post(changelist, {"action": action, "_selected_action": [theirs.pk], "post": "yes"})
    assert list(model._default_manager.filter(pk=theirs.pk).values()) == before, actions


def editable() -> list[str]:
    """The models whose admin has forms (not read-only, not installation-wide)."""
    return [label for label in LABELS if apps.get_model(label) not in INSTALLATION_ONLY
            and not isinstance(admin.site._registry[apps.get_model(label)], ReadOnlyAdmin)]


@pytest.mark.parametrize("label", editable())
def test_no_form_accepts_another_tenants_tenant_user_or_conversation(
    label: str, world: None, scoped: tuple[Client, Operator]
) -> None:
    """Every related choice of the add and change forms (and their inlines) offers only acme's
    rows, and a POST naming globex's row is refused and writes nothing."""
    client, operator = scoped
    model = apps.get_model(label)
    model_admin = admin.site._registry[model]
    request = request_as(operator)
    for obj in (None, row_of(model, MINE)):
        if not (model_admin.has_change_permission(request, obj) if obj else model_admin.has_add_permission(request)):
            continue
        path = url(obj, "change") if obj else reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")
        assert THEIRS not in page(client, path)
        management = {}
        for formset, _ in model_admin.get_formsets_with_inlines(request, obj):
            prefix = formset.get_default_prefix()
            management |= {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"}
        form = model_admin.get_form(request, obj)
        for name, field in form.base_fields.items():
            if not isinstance(field, ModelChoiceField):
                continue
            offered = {str(pk) for pk in field.queryset.values_list("pk", flat=True)}
            assert offered and not offered & rows_of(field.queryset.model, THEIRS), name
            before = list(model._default_manager.values())
            answer = client.post(path, {**management, name: row_of(field.queryset.model, THEIRS).pk})
            assert answer.status_code == 200 and "Select a valid choice" in answer.content.decode(), (path, name)
            assert list(model._default_manager.values()) == before, (path, name)
