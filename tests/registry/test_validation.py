"""Every registry rule, through both doors: the admin form and the REST API (in process)."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from qim.actions.accounts import do_bootstrap_tenant, do_create_user, do_issue_token
from registry.models import CustomMessageType, CustomMessageTypeChange

pytestmark = pytest.mark.django_db

GOOD = {
    "custom_type": "acme.poll.v1", "schema_version": 1, "delivery_class": "persistent",
    "counts_unread": True, "affects_session_order": True, "timeline_visible": True,
    "anchor_mode": "own_seq", "preview_template": "[poll from {sender_id}]",
    "max_payload_bytes": 2048, "minimum_client_version": "1.2", "enabled": True,
}

# (field overrides, the field the error must name)
CREATE_RULES = [
    ({"custom_type": "Acme.Poll"}, "custom_type"),
    ({"custom_type": "nodots"}, "custom_type"),
    ({"custom_type": "qim.mine.v1"}, "custom_type"),
    ({"custom_type": "text"}, "custom_type"),
    ({"delivery_class": "sometimes"}, "delivery_class"),
    ({"anchor_mode": "floating"}, "anchor_mode"),
    ({"max_payload_bytes": 32769}, "max_payload_bytes"),
    ({"max_payload_bytes": 0}, "max_payload_bytes"),
    ({"minimum_client_version": "latest"}, "minimum_client_version"),
    ({"preview_template": "{payload.question}"}, "preview_template"),
    ({"preview_template": ""}, "preview_template"),
    ({"delivery_class": "ephemeral", "counts_unread": True}, "counts_unread"),
]


@pytest.fixture
def tenant_admin():  # type: ignore[no-untyped-def]
    boot = do_bootstrap_tenant("acme", "admin", "pw")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {boot.token}")
    return boot, client


@pytest.fixture
def operator(operator_client: Client) -> Client:
    return operator_client


def admin_form_data(tenant_id: int, values: dict) -> dict:
    data = {"tenant": tenant_id, **values}
    for flag in ("counts_unread", "affects_session_order", "timeline_visible", "enabled"):
        if not data.get(flag):
            data.pop(flag, None)  # unchecked boxes are absent from a form post
        else:
            data[flag] = "on"
    data.update({"changes-TOTAL_FORMS": "0", "changes-INITIAL_FORMS": "0"})
    return data


@pytest.mark.parametrize(("override", "field"), CREATE_RULES)
def test_create_rules_through_the_api(tenant_admin, override: dict, field: str) -> None:  # type: ignore[no-untyped-def]
    _, client = tenant_admin
    answer = client.post("/api/v1/registry/types", {**GOOD, **override}, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "bad_request"
    assert field in answer.json()["fields"]
    assert not CustomMessageType.objects.filter(custom_type=override.get("custom_type", GOOD["custom_type"])).exclude(custom_type__startswith="qim.").exists()


@pytest.mark.parametrize(("override", "field"), CREATE_RULES)
def test_create_rules_through_the_admin_form(tenant_admin, operator: Client, override: dict, field: str) -> None:  # type: ignore[no-untyped-def]
    boot, _ = tenant_admin
    page = operator.post("/admin/registry/custommessagetype/add/", admin_form_data(boot.tenant.pk, {**GOOD, **override}))
    assert page.status_code == 200  # the form again, with errors
    errors = page.context["adminform"].form.errors
    assert field in errors, errors
    assert CustomMessageType.objects.filter(tenant=boot.tenant).exclude(custom_type__startswith="qim.").count() == 0


def test_a_valid_type_is_created_by_both_and_audited(tenant_admin, operator: Client) -> None:  # type: ignore[no-untyped-def]
    boot, client = tenant_admin
    before = CustomMessageType.objects.filter(tenant=boot.tenant).count()
    created = client.post("/api/v1/registry/types", GOOD, format="json")
    assert created.status_code == 201 and created.json()["custom_type"] == "acme.poll.v1"
    page = operator.post("/admin/registry/custommessagetype/add/", admin_form_data(boot.tenant.pk, {**GOOD, "custom_type": "acme.vote.v1"}))
    assert page.status_code == 302, page.context and page.context["adminform"].form.errors
    assert CustomMessageType.objects.filter(tenant=boot.tenant).count() == before + 2
    actors = set(CustomMessageTypeChange.objects.filter(message_type__custom_type__in=["acme.poll.v1", "acme.vote.v1"]).values_list("actor", flat=True))
    assert actors == {"acme:admin", "operator:operator"}


def test_builtin_types_allow_only_counts_unread_and_preview(tenant_admin, operator: Client) -> None:  # type: ignore[no-untyped-def]
    boot, client = tenant_admin
    ok = client.patch("/api/v1/registry/types/qim.call_record.v1", {"counts_unread": False, "preview_template": "Call"}, format="json")
    assert ok.status_code == 200 and ok.json()["counts_unread"] is False
    refused = client.patch("/api/v1/registry/types/qim.call_record.v1", {"timeline_visible": False}, format="json")
    assert refused.status_code == 400 and "timeline_visible" in refused.json()["fields"]
    row = CustomMessageType.objects.get(tenant=boot.tenant, custom_type="qim.call_record.v1")
    values = {k: getattr(row, k) for k in GOOD if k != "custom_type"}
    page = operator.post(f"/admin/registry/custommessagetype/{row.pk}/change/", admin_form_data(boot.tenant.pk, {**values, "max_payload_bytes": 100}))
    assert page.status_code == 200 and "max_payload_bytes" in page.context["adminform"].form.errors
    row.refresh_from_db()
    assert row.max_payload_bytes == 4096 and row.timeline_visible is True


def test_a_full_registry_refuses_new_types_through_both_doors(tenant_admin, operator: Client, settings) -> None:  # type: ignore[no-untyped-def]
    """QIM_MAX_CUSTOM_TYPES_PER_TENANT counts every row, built-in and disabled ones too (a
    REGISTRY reply carries them all); changing a type that exists stays allowed."""
    boot, client = tenant_admin
    settings.QIM_MAX_CUSTOM_TYPES_PER_TENANT = CustomMessageType.objects.filter(tenant=boot.tenant).count() + 1
    assert client.post("/api/v1/registry/types", GOOD, format="json").status_code == 201
    assert client.delete("/api/v1/registry/types/acme.poll.v1").status_code == 200  # disabled: still counts
    full = client.post("/api/v1/registry/types", {**GOOD, "custom_type": "acme.vote.v1"}, format="json")
    assert (full.status_code, full.json()["code"]) == (409, "conflict")
    page = operator.post("/admin/registry/custommessagetype/add/", admin_form_data(boot.tenant.pk, {**GOOD, "custom_type": "acme.quiz.v1"}))
    assert page.status_code == 200 and "the most a tenant may have" in str(page.context["adminform"].form.errors)
    assert not CustomMessageType.objects.filter(custom_type__in=["acme.vote.v1", "acme.quiz.v1"]).exists()
    assert client.patch("/api/v1/registry/types/acme.poll.v1", {"enabled": True}, format="json").status_code == 200


def test_renaming_is_refused_and_duplicates_conflict(tenant_admin) -> None:  # type: ignore[no-untyped-def]
    _, client = tenant_admin
    assert client.post("/api/v1/registry/types", GOOD, format="json").status_code == 201
    assert client.post("/api/v1/registry/types", GOOD, format="json").status_code == 409
    renamed = client.put("/api/v1/registry/types/acme.poll.v1", {**GOOD, "custom_type": "acme.other.v1"}, format="json")
    assert renamed.status_code == 400 and "custom_type" in renamed.json()["fields"]


def test_users_read_and_only_tenant_admins_write(tenant_admin) -> None:  # type: ignore[no-untyped-def]
    boot, _ = tenant_admin
    user = do_create_user(boot.tenant, "alice", "pw")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {do_issue_token(user, 'phone')}")
    assert client.get("/api/v1/registry/types").status_code == 200
    assert client.get("/api/v1/registry/types/qim.read.v1").status_code == 200
    for method in ("post", "put", "patch", "delete"):
        answer = getattr(client, method)("/api/v1/registry/types" + ("" if method == "post" else "/qim.read.v1"), GOOD, format="json")
        assert answer.status_code == 403 and answer.json()["code"] == "forbidden", method


def test_another_tenants_type_is_not_found(tenant_admin) -> None:  # type: ignore[no-untyped-def]
    _, client = tenant_admin
    assert client.post("/api/v1/registry/types", GOOD, format="json").status_code == 201
    other = do_bootstrap_tenant("globex", "admin", "pw")
    outsider = APIClient()
    outsider.credentials(HTTP_AUTHORIZATION=f"Token {other.token}")
    for method in ("get", "patch", "delete"):
        answer = getattr(outsider, method)("/api/v1/registry/types/acme.poll.v1", {"enabled": False}, format="json")
        assert answer.status_code == 404 and answer.json()["code"] == "not_found", method
    assert "acme.poll.v1" not in [t["custom_type"] for t in outsider.get("/api/v1/registry/types").json()]


def test_list_since_version_etag_and_304(tenant_admin) -> None:  # type: ignore[no-untyped-def]
    _, client = tenant_admin
    first = client.get("/api/v1/registry/types")
    assert first.status_code == 200
    names = {t["custom_type"] for t in first.json()}
    assert {"qim.read.v1", "qim.recall.v1", "qim.edit.v1", "qim.membership.v1", "qim.call_record.v1", "qim.reaction.v1"} <= names
    tag, version = first["ETag"], int(first["X-Registry-Version"])
    assert client.get("/api/v1/registry/types", HTTP_IF_NONE_MATCH=tag).status_code == 304
    client.post("/api/v1/registry/types", GOOD, format="json")
    changed = client.get("/api/v1/registry/types", {"since_version": version}, HTTP_IF_NONE_MATCH=tag)
    assert changed.status_code == 200
    assert [t["custom_type"] for t in changed.json()] == ["acme.poll.v1"]
    assert int(changed["X-Registry-Version"]) == version + 1
    disabled = client.delete("/api/v1/registry/types/acme.poll.v1")
    assert disabled.status_code == 200 and disabled.json()["enabled"] is False
    assert [t["enabled"] for t in client.get("/api/v1/registry/types", {"since_version": version + 1}).json()] == [False]
    assert client.get("/api/v1/registry/types", {"since_version": "x"}).status_code == 400
