"""Credentials on the embedded node: tokens stored as digests, self-revocation, deactivation,
the periodic re-check that closes sockets whose revocation notice was lost, login throttles
and refusals that tell nothing."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from qimclient import CLOSE_CREDENTIALS_REVOKED, ApiError, ConnectionLost, QimClient, RestClient
from qimclient import login as sdk_login
from tests.conftest import QimDeployment, start_embedded
from tests.core.credential_helpers import (
    WAIT_S,
    frames_until_closed,
    login,
    new_token,
    open_session,
    revocation_error,
    still_open,
)
from tests.harness.personas import PASSWORD, TenantHandle, api, api_ok

ENV = {
    "QIM_AUTH_TOKEN_RATE_PER_ACCOUNT": "3/minute",
    # Persona logins from 127.0.0.1 count too: the per-address test uses an address of its own.
    "QIM_AUTH_TOKEN_RATE_PER_ADDRESS": "30/minute",
    "QIM_TOKEN_RECHECK_S": "1",
}


@pytest.fixture(scope="module")
def deployment(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


@pytest.fixture
def acme(deployment: QimDeployment) -> TenantHandle:
    return deployment.tenants["acme"]


def test_only_the_digest_is_stored_and_nothing_holds_the_token(deployment: QimDeployment, acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    answer = login(acme.node, {"tenant": "acme", "username": alice.user_id, "password": PASSWORD, "device_id": "phone"})
    assert answer.json()["expires_at_ms"] is None  # QIM_TOKEN_TTL_S is off
    token = answer.json()["token"]
    digest = hashlib.sha256(token.encode()).hexdigest()
    rows = deployment.db.query(
        "SELECT t.digest FROM qim_devicetoken t JOIN qim_device d ON d.id = t.device_id "
        "JOIN qim_user u ON u.id = d.user_id WHERE u.username = ?", (alice.user_id,)
    )
    assert rows == [(digest,)]
    tables = [name for (name,) in deployment.db.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        for row in deployment.db.query(f'SELECT * FROM "{table}"'):
            assert token not in repr(row), table
    assert token not in deployment.node.log_path.read_text()


async def test_a_device_revokes_its_own_token(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    phone, laptop = new_token(alice, "phone"), new_token(alice, "laptop")
    phone_ws, laptop_ws = await open_session(acme.node, phone, "phone"), await open_session(acme.node, laptop, "laptop")
    assert api(acme.node, "DELETE", "auth/token", phone).status_code == 204
    frames, code = await frames_until_closed(phone_ws)
    assert code == 4403
    error = revocation_error(frames)
    assert (error["code"], error["reason"]) == ("unauthenticated", "token_revoked")
    assert await still_open(laptop_ws)  # the laptop's token is another one
    refused = api(acme.node, "GET", "rtc/ice-servers", phone)
    assert (refused.status_code, refused.json()["code"]) == (401, "unauthenticated")
    assert api(acme.node, "DELETE", "auth/token", phone).status_code == 401
    assert api(acme.node, "DELETE", "auth/token").status_code == 401
    with pytest.raises(AssertionError, match="unauthenticated"):
        await open_session(acme.node, phone, "phone")
    await laptop_ws.close()


async def test_a_lost_notice_still_closes_the_socket_at_the_recheck(deployment: QimDeployment, acme: TenantHandle) -> None:
    """The token row goes without any notice (as if the notice were lost): the node's
    re-check (QIM_TOKEN_RECHECK_S=1 here) closes the socket."""
    bob = acme.persona("bob")
    token = new_token(bob, "phone")
    ws = await open_session(acme.node, token, "phone")
    digest = hashlib.sha256(token.encode()).hexdigest()
    deployment.db.query("DELETE FROM qim_devicetoken WHERE digest = ?", (digest,))
    frames, code = await frames_until_closed(ws)
    assert code == 4403
    assert revocation_error(frames)["reason"] == "token_revoked"
    counters = api_ok(acme.node, "GET", "node", acme.admin_token)["counters"]
    assert counters["credentials_closed_by_recheck"] >= 1


async def test_deactivation_closes_sockets_and_answers_logins_like_a_wrong_password(acme: TenantHandle) -> None:
    carol = acme.persona("carol")
    ws = await open_session(acme.node, new_token(carol, "phone"), "phone")
    done = api(acme.node, "POST", f"users/{carol.user_id}/deactivate", acme.admin_token)
    assert done.status_code == 200
    assert done.json() == {"user_id": carol.user_id, "is_active": False, "tokens_revoked": 1}
    frames, code = await frames_until_closed(ws)
    assert code == 4403 and revocation_error(frames)["reason"] == "user_deactivated"
    body = {"tenant": "acme", "username": carol.user_id, "password": PASSWORD, "device_id": "phone"}
    refused = login(acme.node, body, "127.0.0.9")
    wrong = login(acme.node, {**body, "password": "wrong"}, "127.0.0.9")
    assert (refused.status_code, refused.json()) == (wrong.status_code, wrong.json()) == (
        401, {"code": "unauthenticated", "message": "unknown tenant, username or password"})


def test_deactivate_is_for_tenant_admins_of_the_users_tenant(deployment: QimDeployment, acme: TenantHandle) -> None:
    globex = deployment.tenants["globex"]
    dave = acme.persona("dave")
    foreign = api(globex.node, "POST", f"users/{dave.user_id}/deactivate", globex.admin_token)
    missing = api(globex.node, "POST", "users/nobody-at-all/deactivate", globex.admin_token)
    assert (foreign.status_code, foreign.json()["code"]) == (missing.status_code, missing.json()["code"]) == (404, "not_found")
    assert foreign.json()["message"].replace(dave.user_id, "X") == missing.json()["message"].replace("nobody-at-all", "X")
    forbidden = api(acme.node, "POST", f"users/{dave.user_id}/deactivate", dave.token())
    assert (forbidden.status_code, forbidden.json()["code"]) == (403, "forbidden")
    itself = api(acme.node, "POST", "users/admin/deactivate", acme.admin_token)
    assert (itself.status_code, itself.json()["code"]) == (409, "conflict")
    assert api(acme.node, "GET", "rtc/ice-servers", dave.token()).status_code == 200  # dave untouched


def test_refusals_are_identical_for_every_reason(deployment: QimDeployment, acme: TenantHandle) -> None:
    erin = acme.persona("erin")
    base = {"tenant": "acme", "username": erin.user_id, "password": PASSWORD, "device_id": "phone"}
    answers = [
        login(acme.node, {**base, "password": "wrong"}, "127.0.0.10"),
        login(acme.node, {**base, "username": "no-such-user"}, "127.0.0.10"),
        login(acme.node, {**base, "tenant": "no-such-tenant"}, "127.0.0.10"),
        login(acme.node, {**base, "tenant": "globex"}, "127.0.0.10"),  # erin is acme's, not globex's
    ]
    assert {(a.status_code, a.text, a.headers.get("WWW-Authenticate")) for a in answers} == {
        (401, '{"code":"unauthenticated","message":"unknown tenant, username or password"}', None)}


async def test_logins_are_throttled_per_account(acme: TenantHandle) -> None:
    frank = acme.persona("frank")
    body = {"tenant": "acme", "username": frank.user_id, "password": PASSWORD, "device_id": "phone"}
    # 3 per minute: right and wrong passwords count alike, from any address.
    assert [login(acme.node, {**body, "password": p}, "127.0.0.11").status_code for p in (PASSWORD, "x", "y")] == [200, 401, 401]
    for address in ("127.0.0.11", "127.0.0.12"):
        throttled = login(acme.node, body, address)
        assert throttled.status_code == 429
        answer = throttled.json()
        assert answer["code"] == "rate_limited" and answer["message"]
        assert 0 < answer["retry_after_ms"] <= 60_000
        assert 1 <= int(throttled.headers["Retry-After"]) <= 60
    # Another account from the same address is not held back by frank's budget.
    assert new_token(acme.persona("gina"), "phone", address="127.0.0.11")
    # The SDK hands the wait over.
    with pytest.raises(ApiError) as refused:
        await sdk_login(acme.node.http_url, "acme", frank.user_id, PASSWORD, "phone")
    assert (refused.value.status, refused.value.code) == (429, "rate_limited") and refused.value.retry_after_ms > 0


def test_logins_are_throttled_per_address(acme: TenantHandle) -> None:
    """30 per minute per address: the 31st attempt, whatever the account, is refused."""
    answers = [
        login(acme.node, {"tenant": "acme", "username": f"nobody-{i}", "password": "x", "device_id": "d"}, "127.0.0.13")
        for i in range(31)
    ]
    assert [a.status_code for a in answers] == [401] * 30 + [429]
    assert answers[-1].json()["code"] == "rate_limited" and answers[-1].json()["retry_after_ms"] > 0
    helen = acme.persona("helen")
    assert login(acme.node, {"tenant": "acme", "username": helen.user_id, "password": PASSWORD, "device_id": "d"},
                 "127.0.0.13").status_code == 429  # even the right password, from that address
    assert new_token(helen, "d", address="127.0.0.14")  # another address is fine


async def test_the_sdk_stops_for_good_on_4403(acme: TenantHandle) -> None:
    """A revoked session is final: the SDK reports why and does not loop reconnecting."""
    ivan = acme.persona("ivan")
    token = new_token(ivan, "phone")
    client = QimClient(acme.node.ws_url, token, "phone", reconnect=True)
    await client.connect()
    async with RestClient(acme.node.http_url, token) as rest:
        await rest.logout()
    error = await client.next_push(timeout=WAIT_S, type="ERROR")
    assert error["reason"] == "token_revoked"
    async with asyncio.timeout(WAIT_S):
        while not client.is_closed:
            await asyncio.sleep(0.05)
    assert (client.close_code, client.reconnects) == (CLOSE_CREDENTIALS_REVOKED, 0)
    assert isinstance(client.last_error, ConnectionLost)
    await client.close()


def test_the_schema_documents_logout_and_deactivation(acme: TenantHandle) -> None:
    schema = api(acme.node, "GET", "schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
    paths = schema.json()["paths"]
    assert {"post", "delete"} <= set(paths["/api/v1/auth/token"])
    assert "post" in paths["/api/v1/users/{user_id}/deactivate"]
