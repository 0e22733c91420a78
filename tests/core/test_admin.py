"""The operators' admin lists tenants, users and devices (Django test client, in process)."""

from __future__ import annotations

import pytest
from django.test import Client

from qim.actions.accounts import do_bootstrap_tenant, do_issue_token

pytestmark = pytest.mark.django_db


def test_admin_lists_tenants_users_and_devices(operator_client: Client) -> None:
    boot = do_bootstrap_tenant("acme", "boss", "pw")
    do_issue_token(boot.admin, "tablet")
    for path, expected in [
        ("/admin/qim/tenant/", "acme"),
        ("/admin/qim/user/", "boss"),
        ("/admin/qim/device/", "tablet"),
        (f"/admin/qim/user/{boot.admin.pk}/change/", "tablet"),
    ]:
        page = operator_client.get(path)
        assert page.status_code == 200, path
        assert expected in page.content.decode(), path


def test_admin_never_shows_password_hashes_or_tokens(operator_client: Client) -> None:
    boot = do_bootstrap_tenant("acme", "boss", "pw")
    page = operator_client.get(f"/admin/qim/user/{boot.admin.pk}/change/").content.decode()
    assert boot.admin.password_hash not in page
    assert boot.token not in page


def test_admin_never_shows_push_credentials(operator_client: Client) -> None:
    boot = do_bootstrap_tenant("acme", "boss", "pw")
    do_issue_token(boot.admin, "phone")
    device = boot.admin.devices.get(device_id="phone")
    device.push_platform, device.push_token, device.voip_token = "ios", "apns-secret-push-token", "apns-secret-voip-token"
    device.save()
    pages = [
        operator_client.get(f"/admin/qim/user/{boot.admin.pk}/change/"),
        operator_client.get("/admin/qim/device/"),
        operator_client.get(f"/admin/qim/device/{device.pk}/change/"),
    ]
    for page in pages:
        text = page.content.decode()
        assert page.status_code == 200
        assert "apns-secret-push-token" not in text and "apns-secret-voip-token" not in text
        assert "ios" in text
    # Saving the device page cannot overwrite them either: the fields are not in the form.
    operator_client.post(f"/admin/qim/device/{device.pk}/change/", {"user": boot.admin.pk, "push_token": "x"})
    device.refresh_from_db()
    assert device.push_token == "apns-secret-push-token"


def test_the_contract_models_are_in_the_admin_read_only(operator_client: Client) -> None:
    for path in ("/admin/qim/messagerecord/", "/admin/qim/usermailboxentry/", "/admin/qim/pushtask/",
                 "/admin/qim/userbadgestate/", "/admin/reactions/messagereaction/",
                 "/admin/reactions/messagereactionsummary/", "/admin/registry/custommessagetype/"):
        assert operator_client.get(path).status_code == 200, path
    assert operator_client.get("/admin/qim/pushtask/add/").status_code == 403


def test_every_registered_admin_list_and_its_date_filters_render(operator_client: Client) -> None:
    """Every app's admin (all built on qim.admin.base) renders its list, and each of its
    `*_ms` date filters answers: a mistake in the shared base would break them all at once."""
    from django.contrib import admin
    from django.urls import reverse

    do_bootstrap_tenant("acme", "boss", "pw")
    for model, model_admin in admin.site._registry.items():
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        page = operator_client.get(url)
        assert page.status_code == 200, url
        for name in (f.name for f in model._meta.fields if f.name.endswith("_ms")):
            param = f"{name.removesuffix('_ms')}_since"
            if param in page.content.decode():
                for choice in ("1h", "older"):
                    assert operator_client.get(f"{url}?{param}={choice}").status_code == 200, (url, param, choice)
