"""Per-tenant push credentials over REST on a real daphne: tenant admins set, read and clear
them; secrets are checked before they are stored and never come back in an answer or a log;
and POST devices/{id}/push's rules for platform web."""

from __future__ import annotations

import base64
import os

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives import serialization

from tests.harness.personas import TenantHandle, api, api_ok
from tests.push.credential_keys import (
    apns_values,
    one_line,
    p256_pem,
    pem_body_lines,
    public_point_b64url,
    raw_scalar_b64url,
    rsa_pem,
    service_account,
)

NOTHING = {
    "apns": {"configured": False, "key_id": None, "team_id": None, "bundle_id": None, "environment": None,
             "source": None},
    "fcm": {"configured": False, "project_id": None, "client_email": None, "source": None},
    "web": {"configured": False, "public_key": None, "subject": None, "source": None},
}


def assert_no_secret(text: str, *secret_pems: str) -> None:
    for secret in secret_pems:
        for line in pem_body_lines(secret):
            assert line not in text


@pytest.fixture
def clean(acme: TenantHandle, globex: TenantHandle) -> TenantHandle:
    """acme and globex with none of their own credentials (tests share one deployment)."""
    for tenant in (acme, globex):
        for provider in ("apns", "fcm", "web"):
            api_ok(tenant.node, "DELETE", f"push/credentials/{provider}", tenant.admin_token)
    return acme


def test_nothing_is_configured_on_a_fresh_server(clean: TenantHandle) -> None:
    assert api_ok(clean.node, "GET", "push/credentials", clean.admin_token) == NOTHING
    refused = api(clean.node, "GET", "push/vapid-public-key", clean.persona("alice").token())
    assert (refused.status_code, refused.json()["code"]) == (404, "not_found")


def test_apns_credentials_are_stored_and_only_the_ids_come_back(clean: TenantHandle) -> None:
    values = apns_values()
    answer = api(clean.node, "PUT", "push/credentials/apns", clean.admin_token, json=values)
    assert answer.status_code == 200, answer.text
    assert answer.json()["apns"] == {"configured": True, "key_id": "ABC123DEFG", "team_id": "TEAM123456",
                                     "bundle_id": "com.example.qim", "environment": "sandbox", "source": "tenant"}
    again = api(clean.node, "GET", "push/credentials", clean.admin_token)
    assert again.json() == answer.json()
    assert "key_pem" not in again.text and "PRIVATE KEY" not in again.text
    assert_no_secret(answer.text + again.text, values["key_pem"])
    # A PEM whose line breaks a form dropped is the same key.
    api_ok(clean.node, "PUT", "push/credentials/apns", clean.admin_token,
           json={**values, "key_pem": one_line(values["key_pem"]), "environment": "production"})
    assert api_ok(clean.node, "GET", "push/credentials", clean.admin_token)["apns"]["environment"] == "production"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"key_pem": "rsa"}, "P-256"),
        ({"key_pem": "garbage"}, "not a PEM private key"),
        ({"key_id": "abc"}, "key_id"),
        ({"team_id": "TEAM/12345"}, "team_id"),
        ({"bundle_id": "com.example qim"}, "bundle_id"),
        ({"environment": "staging"}, "environment"),
        ({"key_pem": None}, "key_pem"),
    ],
)
def test_bad_apns_credentials_are_refused_without_echoing_the_key(
    clean: TenantHandle, change: dict, needle: str
) -> None:
    values = apns_values()
    if change.get("key_pem") == "rsa":
        change = {"key_pem": rsa_pem()}
    elif change.get("key_pem") == "garbage":
        change = {"key_pem": "-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(os.urandom(90)).decode()
                  + "\n-----END PRIVATE KEY-----\n"}
    body = {k: v for k, v in {**values, **change}.items() if v is not None}
    refused = api(clean.node, "PUT", "push/credentials/apns", clean.admin_token, json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "bad_request" and needle in refused.json()["message"]
    assert_no_secret(refused.text, body.get("key_pem", values["key_pem"]))
    assert api_ok(clean.node, "GET", "push/credentials", clean.admin_token)["apns"]["configured"] is False


def test_an_fcm_service_account_is_stored_and_its_private_key_never_comes_back(clean: TenantHandle) -> None:
    account = service_account()
    answer = api(clean.node, "PUT", "push/credentials/fcm", clean.admin_token, json={"service_account": account})
    assert answer.status_code == 200, answer.text
    assert answer.json()["fcm"] == {"configured": True, "project_id": "qim-push-test",
                                    "client_email": account["client_email"], "source": "tenant"}
    assert "private_key" not in answer.text and account["private_key_id"] not in answer.text
    assert_no_secret(answer.text, account["private_key"])


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"type": "authorized_user"}, "type"),
        ({"project_id": "../../v1/evil"}, "project_id"),
        ({"client_email": "not-an-email"}, "client_email"),
        ({"private_key": "p256"}, "RSA"),
        ({"private_key": None}, "private_key is missing"),
        # The server POSTs a signed assertion to token_uri: an SSRF door unless pinned.
        ({"token_uri": "http://oauth2.googleapis.com/token"}, "https"),
        ({"token_uri": "https://169.254.169.254/latest"}, "not an allowed token endpoint"),
        ({"token_uri": "https://user:pw@oauth2.googleapis.com/token"}, "https"),
    ],
)
def test_bad_service_accounts_are_refused_without_echoing_the_key(
    clean: TenantHandle, change: dict, needle: str
) -> None:
    if change.get("private_key") == "p256":
        change = {"private_key": p256_pem()}
    account = {k: v for k, v in {**service_account(), **change}.items() if v is not None}
    refused = api(clean.node, "PUT", "push/credentials/fcm", clean.admin_token, json={"service_account": account})
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "bad_request" and needle in refused.json()["message"], refused.text
    assert_no_secret(refused.text, account.get("private_key", ""))
    for not_an_object in ("a string", [1, 2], None):
        refused = api(clean.node, "PUT", "push/credentials/fcm", clean.admin_token,
                      json={"service_account": not_an_object})
        assert (refused.status_code, refused.json()["code"]) == (400, "bad_request")
    assert api_ok(clean.node, "GET", "push/credentials", clean.admin_token)["fcm"]["configured"] is False


def test_a_vapid_key_given_as_pem_or_base64url_publishes_its_public_key(clean: TenantHandle) -> None:
    alice = clean.persona("alice")
    key = p256_pem()
    for given in (key, one_line(key), raw_scalar_b64url(key)):
        answer = api(clean.node, "PUT", "push/credentials/web", clean.admin_token,
                     json={"private_key": given, "subject": "mailto:ops@example.com"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["web"] == {"configured": True, "public_key": public_point_b64url(key),
                                        "subject": "mailto:ops@example.com", "source": "tenant"}
        assert raw_scalar_b64url(key) not in answer.text
        assert_no_secret(answer.text, key)
    assert api_ok(clean.node, "GET", "push/vapid-public-key", alice.token()) == {"public_key": public_point_b64url(key)}
    # Without a key, only the subject changes.
    answer = api_ok(clean.node, "PUT", "push/credentials/web", clean.admin_token, json={"subject": "https://example.com/ops"})
    assert answer["web"]["public_key"] == public_point_b64url(key)
    assert answer["web"]["subject"] == "https://example.com/ops"


def test_bad_vapid_settings_are_refused(clean: TenantHandle) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    for body, needle in [
        ({"private_key": p384, "subject": "mailto:ops@example.com"}, "P-256"),
        ({"private_key": rsa_pem(), "subject": "mailto:ops@example.com"}, "P-256"),
        ({"private_key": "not base64 at all!", "subject": "mailto:ops@example.com"}, "P-256"),
        ({"private_key": p256_pem(), "subject": "ops@example.com"}, "subject"),
        ({"private_key": p256_pem(), "subject": "http://example.com"}, "subject"),
        ({"subject": "mailto:ops@example.com"}, "no VAPID key of this tenant"),
    ]:
        refused = api(clean.node, "PUT", "push/credentials/web", clean.admin_token, json=body)
        assert refused.status_code == 400, (body, refused.text)
        assert refused.json()["code"] == "bad_request" and needle in refused.json()["message"], refused.text
        assert "PRIVATE KEY" not in refused.text
    refused = api(clean.node, "POST", "push/credentials/web/generate", clean.admin_token, json={"subject": "nope"})
    assert (refused.status_code, refused.json()["code"]) == (400, "bad_request")
    assert api_ok(clean.node, "GET", "push/credentials", clean.admin_token) == NOTHING


def test_generate_makes_a_new_key_pair_that_browsers_subscribe_with(clean: TenantHandle) -> None:
    alice = clean.persona("alice")
    first = api(clean.node, "POST", "push/credentials/web/generate", clean.admin_token,
                json={"subject": "mailto:ops@example.com"})
    assert first.status_code == 201, first.text
    public_key = first.json()["public_key"]
    point = base64.urlsafe_b64decode(public_key + "=" * (-len(public_key) % 4))
    assert len(point) == 65 and point[0] == 4  # the uncompressed point applicationServerKey wants
    ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    assert api_ok(clean.node, "GET", "push/vapid-public-key", alice.token()) == {"public_key": public_key}
    second = api_ok(clean.node, "POST", "push/credentials/web/generate", clean.admin_token,
                    json={"subject": "mailto:ops@example.com"})["public_key"]
    assert second != public_key
    assert api_ok(clean.node, "GET", "push/vapid-public-key", alice.token()) == {"public_key": second}
    assert set(first.json()) == {"public_key"}


def test_delete_clears_only_that_provider(clean: TenantHandle) -> None:
    api_ok(clean.node, "PUT", "push/credentials/apns", clean.admin_token, json=apns_values())
    api_ok(clean.node, "PUT", "push/credentials/fcm", clean.admin_token, json={"service_account": service_account()})
    api_ok(clean.node, "POST", "push/credentials/web/generate", clean.admin_token, json={"subject": "mailto:a@b.c"})
    answer = api_ok(clean.node, "DELETE", "push/credentials/fcm", clean.admin_token)
    assert [answer[p]["configured"] for p in ("apns", "fcm", "web")] == [True, False, True]
    assert answer["fcm"] == NOTHING["fcm"]
    api_ok(clean.node, "DELETE", "push/credentials/apns", clean.admin_token)
    api_ok(clean.node, "DELETE", "push/credentials/web", clean.admin_token)
    assert api_ok(clean.node, "GET", "push/credentials", clean.admin_token) == NOTHING
    for method in ("PUT", "DELETE"):
        missing = api(clean.node, method, "push/credentials/sms", clean.admin_token, json={})
        assert (missing.status_code, missing.json()["code"]) == (404, "not_found")


def test_only_tenant_admins_see_or_change_credentials(clean: TenantHandle) -> None:
    alice = clean.persona("alice")
    calls = [("GET", "push/credentials", None), ("PUT", "push/credentials/apns", apns_values()),
             ("PUT", "push/credentials/web", {"private_key": p256_pem(), "subject": "mailto:a@b.c"}),
             ("DELETE", "push/credentials/web", None),
             ("POST", "push/credentials/web/generate", {"subject": "mailto:a@b.c"})]
    for method, path, body in calls:
        kwargs = {"json": body} if body is not None else {}
        forbidden = api(clean.node, method, path, alice.token(), **kwargs)
        assert (forbidden.status_code, forbidden.json()) == (403, {"code": "forbidden", "message": "tenant admins only"})
        anonymous = api(clean.node, method, path, None, **kwargs)
        assert (anonymous.status_code, anonymous.json()["code"]) == (401, "unauthenticated")
    assert api_ok(clean.node, "GET", "push/credentials", clean.admin_token) == NOTHING


def test_each_tenant_sees_and_changes_only_its_own(clean: TenantHandle, globex: TenantHandle) -> None:
    acme = clean
    api_ok(acme.node, "PUT", "push/credentials/apns", acme.admin_token, json=apns_values())
    acme_key = api_ok(acme.node, "POST", "push/credentials/web/generate", acme.admin_token,
                      json={"subject": "mailto:a@acme.example"})["public_key"]
    assert api_ok(globex.node, "GET", "push/credentials", globex.admin_token) == NOTHING
    gina = globex.persona("gina")
    assert api(globex.node, "GET", "push/vapid-public-key", gina.token()).status_code == 404
    globex_key = api_ok(globex.node, "POST", "push/credentials/web/generate", globex.admin_token,
                        json={"subject": "mailto:g@globex.example"})["public_key"]
    api_ok(globex.node, "DELETE", "push/credentials/apns", globex.admin_token)
    mine = api_ok(acme.node, "GET", "push/credentials", acme.admin_token)
    assert mine["apns"]["configured"] is True and mine["web"]["public_key"] == acme_key != globex_key
    assert api_ok(globex.node, "GET", "push/vapid-public-key", gina.token()) == {"public_key": globex_key}


def test_no_secret_reaches_the_node_log(clean: TenantHandle) -> None:
    apns, account, vapid = apns_values(), service_account(), p256_pem()
    api_ok(clean.node, "PUT", "push/credentials/apns", clean.admin_token, json=apns)
    api_ok(clean.node, "PUT", "push/credentials/fcm", clean.admin_token, json={"service_account": account})
    api_ok(clean.node, "PUT", "push/credentials/web", clean.admin_token,
           json={"private_key": vapid, "subject": "mailto:a@b.c"})
    api(clean.node, "PUT", "push/credentials/web", clean.admin_token,
        json={"private_key": vapid[:200], "subject": "mailto:a@b.c"})  # refused
    log = clean.node.log_path.read_text()
    assert_no_secret(log, apns["key_pem"], account["private_key"], vapid)
    assert raw_scalar_b64url(vapid) not in log


# POST devices/{id}/push for platform web (the contract of protocol.md §13.3).
P256DH = public_point_b64url(p256_pem())
AUTH = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
SUBSCRIPTION = {"endpoint": "https://fcm.googleapis.com/fcm/send/abc:def", "keys": {"p256dh": P256DH, "auth": AUTH}}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"platform": "web"}, "subscription"),
        ({"platform": "web", "push_token": "t"}, "subscription"),
        ({"platform": "web", "subscription": SUBSCRIPTION, "voip_token": "v"}, "voip_token"),
        ({"platform": "ios"}, "push_token"),
        ({"platform": "android", "subscription": SUBSCRIPTION}, "push_token"),
        ({"platform": "web", "subscription": {**SUBSCRIPTION, "endpoint": "https://10.0.0.1/push"}}, "not an allowed"),
        ({"platform": "web", "subscription": {**SUBSCRIPTION, "endpoint": "http://fcm.googleapis.com/x"}}, "https"),
        ({"platform": "web", "subscription": {**SUBSCRIPTION, "keys": {"p256dh": P256DH}}}, "auth"),
        ({"platform": "web", "subscription": {**SUBSCRIPTION, "keys": {"p256dh": AUTH, "auth": AUTH}}}, "p256dh"),
        ({"platform": "sms", "push_token": "t"}, "platform"),
    ],
)
def test_device_push_rules_per_platform(acme: TenantHandle, body: dict, needle: str) -> None:
    alice = acme.persona("alice")
    refused = api(acme.node, "POST", "devices/phone/push", alice.token(), json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "bad_request" and needle in refused.json()["message"], refused.text


def test_a_web_subscription_on_an_allowed_push_service_is_accepted(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    for body in ({"platform": "web", "subscription": SUBSCRIPTION},
                 {"platform": "ios", "push_token": "apns-token", "voip_token": "pushkit-token"},
                 {"platform": "android", "push_token": "fcm-token"}):
        answer = api_ok(acme.node, "POST", "devices/laptop/push", alice.token("laptop"), json=body)
        assert answer == {"device_id": "laptop", "platform": body["platform"]}
