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


def test_the_contract_models_are_in_the_admin_read_only(operator_client: Client) -> None:
    for path in ("/admin/qim/messagerecord/", "/admin/qim/usermailboxentry/", "/admin/qim/pushtask/",
                 "/admin/qim/userbadgestate/", "/admin/reactions/messagereaction/",
                 "/admin/reactions/messagereactionsummary/", "/admin/registry/custommessagetype/"):
        assert operator_client.get(path).status_code == 200, path
    assert operator_client.get("/admin/qim/pushtask/add/").status_code == 403
