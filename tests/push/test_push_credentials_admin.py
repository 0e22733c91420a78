"""Operators set a tenant's push credentials in the admin (in process): secrets are checked,
stored, never rendered back, and kept when their field is left empty."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from qim.actions.accounts import do_bootstrap_tenant
from push_providers.credentials import credentials_for
from push_providers.models import TenantPushConfig
from tests.push.credential_keys import one_line, p256_pem, pem_body_lines, public_point_b64url, rsa_pem, service_account

pytestmark = pytest.mark.django_db
ADD = "/admin/push_providers/tenantpushconfig/add/"
LIST = "/admin/push_providers/tenantpushconfig/"


def change_url(config: TenantPushConfig) -> str:
    return f"/admin/push_providers/tenantpushconfig/{config.pk}/change/"


def form(tenant_id: int, **fields: str) -> dict[str, object]:
    data = {"tenant": tenant_id, "apns_key_pem": "", "apns_key_id": "", "apns_team_id": "", "apns_bundle_id": "",
            "apns_environment": "production", "fcm_service_account_json": "", "vapid_private_key_pem": "",
            "vapid_subject": ""}
    return {**data, **fields}


def assert_hidden(html: str, *secrets: str) -> None:
    for secret in secrets:
        for line in pem_body_lines(secret):
            assert line not in html


@pytest.fixture
def secrets() -> dict[str, str]:
    account = service_account()
    return {"apns": p256_pem(), "fcm": account["private_key"], "fcm_json": json.dumps(account, indent=2),
            "vapid": p256_pem()}


def add_full_config(client: Client, tenant_id: int, secrets: dict[str, str]) -> TenantPushConfig:
    page = client.post(ADD, form(
        tenant_id, apns_key_pem=one_line(secrets["apns"]), apns_key_id="ABC123DEFG", apns_team_id="TEAM123456",
        apns_bundle_id="com.example.qim", apns_environment="sandbox", fcm_service_account_json=secrets["fcm_json"],
        vapid_private_key_pem=secrets["vapid"], vapid_subject="mailto:ops@example.com"))
    assert page.status_code == 302, page.content.decode()[:3000]
    return TenantPushConfig.objects.get(tenant_id=tenant_id)


def test_an_operator_sets_every_provider_and_no_page_shows_a_secret(
    operator_client: Client, secrets: dict[str, str]
) -> None:
    acme = do_bootstrap_tenant("acme", "boss", "pw").tenant
    config = add_full_config(operator_client, acme.pk, secrets)
    assert config.updated_at_ms > 0
    resolved = credentials_for(acme.pk)
    assert resolved.apns is not None and resolved.apns.key_pem == secrets["apns"]  # line breaks restored
    assert resolved.fcm is not None and resolved.fcm.project_id == "qim-push-test"
    assert resolved.vapid is not None and resolved.vapid.public_key_b64url() == public_point_b64url(secrets["vapid"])
    for path in (LIST, change_url(config), f"{LIST}?q=acme"):
        page = operator_client.get(path)
        html = page.content.decode()
        assert page.status_code == 200, path
        assert_hidden(html, secrets["apns"], secrets["fcm"], secrets["vapid"])
        assert "PRIVATE KEY" not in html
        assert html.count('alt="True"') >= 3, path  # APNs, FCM and Web Push shown as configured


def test_an_empty_secret_field_keeps_the_stored_secret(operator_client: Client, secrets: dict[str, str]) -> None:
    acme = do_bootstrap_tenant("acme", "boss", "pw").tenant
    config = add_full_config(operator_client, acme.pk, secrets)
    stored = (config.apns_key_pem, config.fcm_service_account_json, config.vapid_private_key_pem)
    page = operator_client.post(change_url(config), form(
        acme.pk, apns_key_id="NEWKEY1234", apns_team_id="TEAM123456", apns_bundle_id="com.example.qim",
        apns_environment="production", vapid_subject="https://example.com/ops"))
    assert page.status_code == 302, page.content.decode()[:3000]
    config.refresh_from_db()
    assert (config.apns_key_pem, config.fcm_service_account_json, config.vapid_private_key_pem) == stored
    assert (config.apns_key_id, config.apns_environment, config.vapid_subject) == (
        "NEWKEY1234", "production", "https://example.com/ops")


def test_a_bad_secret_is_refused_on_the_form_without_echoing_it(operator_client: Client) -> None:
    acme = do_bootstrap_tenant("acme", "boss", "pw").tenant
    rsa_key = rsa_pem()
    bad_account = json.dumps(service_account(token_uri="https://metadata.internal/token"))
    page = operator_client.post(ADD, form(acme.pk, apns_key_pem=rsa_key, apns_key_id="ABC123DEFG",
                                          apns_team_id="lowercase!", fcm_service_account_json=bad_account,
                                          vapid_private_key_pem=rsa_key, vapid_subject="ops@example.com"))
    html = page.content.decode()
    assert page.status_code == 200
    for message in ("key_pem must be a P-256", "team_id must be", "not an allowed token endpoint",
                    "private_key must be a P-256", "subject must be a mailto"):
        assert message in html, message
    assert_hidden(html, rsa_key, json.loads(bad_account)["private_key"])
    assert not TenantPushConfig.objects.filter(tenant=acme).exists()


def test_the_generate_action_makes_a_new_vapid_key_pair(operator_client: Client, secrets: dict[str, str]) -> None:
    acme = do_bootstrap_tenant("acme", "boss", "pw").tenant
    globex = do_bootstrap_tenant("globex", "boss", "pw").tenant
    config = add_full_config(operator_client, acme.pk, secrets)
    other = add_full_config(operator_client, globex.pk, {**secrets, "vapid": p256_pem()})
    before = other.vapid_private_key_pem
    page = operator_client.post(LIST, {"action": "generate_vapid_key_pair", "_selected_action": [config.pk]},
                                follow=True)
    html = page.content.decode()
    config.refresh_from_db()
    other.refresh_from_db()
    assert config.vapid_private_key_pem != secrets["vapid"]
    public_key = credentials_for(acme.pk).vapid.public_key_b64url()  # type: ignore[union-attr]
    assert f"new VAPID public key {public_key}" in html
    assert_hidden(html, config.vapid_private_key_pem)
    assert other.vapid_private_key_pem == before  # globex's row was not selected
    assert config.vapid_subject == "mailto:ops@example.com"


def test_the_tenant_of_a_config_is_fixed_and_deleting_falls_back(operator_client: Client, secrets: dict[str, str]) -> None:
    acme = do_bootstrap_tenant("acme", "boss", "pw").tenant
    globex = do_bootstrap_tenant("globex", "boss", "pw").tenant
    config = add_full_config(operator_client, acme.pk, secrets)
    page = operator_client.post(change_url(config), form(globex.pk, apns_key_id="ABC123DEFG", apns_team_id="TEAM123456",
                                                         apns_bundle_id="com.example.qim"))
    assert page.status_code == 302, page.content.decode()[:3000]
    config.refresh_from_db()
    assert config.tenant_id == acme.pk  # the posted tenant was ignored
    assert credentials_for(globex.pk).apns is None
    page = operator_client.post(f"/admin/push_providers/tenantpushconfig/{config.pk}/delete/", {"post": "yes"})
    assert page.status_code == 302
    assert not TenantPushConfig.objects.filter(pk=config.pk).exists()
    assert credentials_for(acme.pk) == credentials_for(globex.pk)  # both on the (empty) global ones
