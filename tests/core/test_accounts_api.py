"""REST accounts over a real daphne: login, users, errors as {code, message}."""

from __future__ import annotations

import pytest

from tests.harness.personas import PASSWORD, TenantHandle, api


def test_login_answers_a_new_token_each_time(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    body = {"tenant": "acme", "username": alice.user_id, "password": PASSWORD, "device_id": "tab"}
    first = api(acme.node, "POST", "auth/token", json=body)
    assert first.status_code == 200
    assert first.json()["user_id"] == alice.user_id
    again = api(acme.node, "POST", "auth/token", json=body)
    # Only digests are stored, so a token is shown once; both stay valid.
    assert again.json()["token"] != first.json()["token"]
    for token in (first.json()["token"], again.json()["token"]):
        assert api(acme.node, "GET", "rtc/ice-servers", token).status_code == 200
    other_device = api(acme.node, "POST", "auth/token", json={**body, "device_id": "desk"})
    assert other_device.json()["token"] != first.json()["token"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"tenant": "acme", "username": "admin", "password": "wrong", "device_id": "d"}, 401, "unauthenticated"),
        ({"tenant": "nosuch", "username": "admin", "password": "admin-pw", "device_id": "d"}, 401, "unauthenticated"),
        ({"tenant": "acme", "username": "admin", "password": "admin-pw"}, 400, "bad_request"),
        ({"tenant": "acme", "username": "admin", "password": "admin-pw", "device_id": "bad id!"}, 400, "bad_request"),
        ({"tenant": 5, "username": [], "password": None, "device_id": "d"}, 400, "bad_request"),
    ],
)
def test_login_refusals(acme: TenantHandle, body: dict, status: int, code: str) -> None:
    answer = api(acme.node, "POST", "auth/token", json=body)
    assert answer.status_code == status
    assert answer.json()["code"] == code
    assert answer.json()["message"]


def test_malformed_json_body_is_400(acme: TenantHandle) -> None:
    answer = api(acme.node, "POST", "auth/token", content=b"{nope", headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["code"] == "bad_request"


def test_admin_creates_users_201_and_a_duplicate_is_409(acme: TenantHandle) -> None:
    created = api(acme.node, "POST", "users", acme.admin_token, json={"username": "zed-1", "password": "pw", "display_name": "Zed"})
    assert created.status_code == 201
    assert created.json() == {"user_id": "zed-1"}
    duplicate = api(acme.node, "POST", "users", acme.admin_token, json={"username": "zed-1", "password": "pw"})
    assert duplicate.status_code == 409
    assert duplicate.json()["code"] == "conflict"


def test_same_username_in_two_tenants_is_two_users(acme: TenantHandle, globex: TenantHandle) -> None:
    for tenant in (acme, globex):
        answer = api(tenant.node, "POST", "users", tenant.admin_token, json={"username": "twin", "password": f"pw-{tenant.name}"})
        assert answer.status_code == 201
    login = api(acme.node, "POST", "auth/token", json={"tenant": "globex", "username": "twin", "password": "pw-acme", "device_id": "d"})
    assert login.status_code == 401


def test_only_tenant_admins_create_users(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    answer = api(acme.node, "POST", "users", alice.token(), json={"username": "x-1", "password": "pw"})
    assert answer.status_code == 403
    assert answer.json()["code"] == "forbidden"
    anonymous = api(acme.node, "POST", "users", None, json={"username": "x-2", "password": "pw"})
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "unauthenticated"
    bad_token = api(acme.node, "POST", "users", "not-a-token", json={"username": "x-3", "password": "pw"})
    assert bad_token.status_code == 401


def test_unknown_path_and_wrong_method_are_json_errors(acme: TenantHandle) -> None:
    missing = api(acme.node, "GET", "no/such/thing", acme.admin_token)
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    wrong_method = api(acme.node, "GET", "auth/token")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["code"] == "method_not_allowed"
    unacceptable = api(acme.node, "GET", "rtc/ice-servers", acme.admin_token, headers={"Accept": "application/xml"})
    assert (unacceptable.status_code, unacceptable.json()["code"]) == (406, "not_acceptable")
    foreign_host = api(acme.node, "GET", "health", headers={"Host": "evil.example"})
    assert (foreign_host.status_code, foreign_host.json()["code"]) == (400, "bad_request")


def test_openapi_schema_and_docs_are_served(acme: TenantHandle) -> None:
    schema = api(acme.node, "GET", "schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/auth/token" in paths and "/api/v1/users" in paths
    # A plain Django view, declared by hand (qim/api/schema.py); the REST fuzzer checks its answers.
    assert {"200", "503"} <= set(paths["/api/v1/ready"]["get"]["responses"])
    assert api(acme.node, "GET", "docs/").status_code == 200
