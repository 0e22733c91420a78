"""Credentials across two nodes (PostgreSQL, Redis): the revocation notice closes the sockets
on every node (the re-check is set to an hour here, so only the notice can have closed them),
and the login throttle is one budget for all nodes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.core.credential_helpers import frames_until_closed, new_token, open_session, revocation_error, still_open
from tests.harness.personas import PASSWORD, TenantHandle, api, api_ok

ENV = {"QIM_TOKEN_RECHECK_S": "3600", "QIM_AUTH_TOKEN_RATE_PER_ACCOUNT": "16/minute"}


@pytest.fixture(scope="module")
def deployment(postgres, pg_template, redis_proc, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


@pytest.fixture
def acme(deployment: QimDeployment) -> TenantHandle:
    return deployment.tenants["acme"]


def closed_by_notice(deployment: QimDeployment, admin_token: str) -> list[int]:
    return [
        api_ok(node, "GET", "node", admin_token)["counters"].get("credentials_closed_by_notice", 0)
        for node in deployment.nodes
    ]


async def test_deactivation_closes_the_users_sockets_on_both_nodes(deployment: QimDeployment, acme: TenantHandle) -> None:
    n1, n2 = deployment.nodes
    alice, bob = acme.persona("alice"), acme.persona("bob")
    before = closed_by_notice(deployment, acme.admin_token)
    sockets = [
        await open_session(n1, new_token(alice, "phone", n1), "phone"),
        await open_session(n2, new_token(alice, "laptop", n2), "laptop"),
        await open_session(n2, new_token(alice, "tablet", n1), "tablet"),
    ]
    bystander = await open_session(n2, new_token(bob, "phone", n2), "phone")
    done = api_ok(n2, "POST", f"users/{alice.user_id}/deactivate", acme.admin_token)
    assert done["tokens_revoked"] == 3
    for ws in sockets:
        frames, code = await frames_until_closed(ws)
        assert code == 4403
        error = revocation_error(frames)
        assert (error["code"], error["reason"]) == ("unauthenticated", "user_deactivated")
    assert await still_open(bystander)
    after = closed_by_notice(deployment, acme.admin_token)
    assert [a - b for a, b in zip(after, before)] == [1, 2]
    for node in (n1, n2):
        refused = api(node, "POST", "auth/token", json={"tenant": "acme", "username": alice.user_id,
                                                       "password": PASSWORD, "device_id": "phone"})
        assert (refused.status_code, refused.json()["code"]) == (401, "unauthenticated")
    await bystander.close()


async def test_a_revoked_token_closes_its_sockets_on_both_nodes_only(deployment: QimDeployment, acme: TenantHandle) -> None:
    n1, n2 = deployment.nodes
    carol = acme.persona("carol")
    token, other = new_token(carol, "phone", n1), new_token(carol, "phone", n2)
    same_token = [await open_session(n1, token, "phone"), await open_session(n2, token, "phone")]
    other_token = await open_session(n2, other, "phone")
    assert api(n1, "DELETE", "auth/token", token).status_code == 204
    results = await asyncio.gather(*(frames_until_closed(ws) for ws in same_token))
    for frames, code in results:
        assert code == 4403 and revocation_error(frames)["reason"] == "token_revoked"
    assert await still_open(other_token)  # the device's other token is still good
    for node in (n1, n2):
        assert api(node, "GET", "rtc/ice-servers", token).status_code == 401
        assert api(node, "GET", "rtc/ice-servers", other).status_code == 200
    await other_token.close()


def test_the_login_budget_of_an_account_is_shared_by_the_nodes(deployment: QimDeployment, acme: TenantHandle) -> None:
    n1, n2 = deployment.nodes
    dora = acme.persona("dora")
    body = {"tenant": "acme", "username": dora.user_id, "password": PASSWORD, "device_id": "phone"}
    statuses = [api(node, "POST", "auth/token", json=body).status_code for node in (n1, n2) * 8]
    assert statuses == [200] * 16
    for node in (n1, n2):
        throttled = api(node, "POST", "auth/token", json=body)
        assert (throttled.status_code, throttled.json()["code"]) == (429, "rate_limited")
        assert throttled.json()["retry_after_ms"] > 0


async def test_a_token_pushed_out_by_newer_logins_of_its_device_closes_its_socket(deployment: QimDeployment, acme: TenantHandle) -> None:
    n1, n2 = deployment.nodes
    erin = acme.persona("erin")
    oldest = new_token(erin, "phone", n1)
    ws = await open_session(n2, oldest, "phone")
    assert ws is not None
    newer = [new_token(erin, "phone", (n1, n2)[i % 2]) for i in range(10)]  # the device keeps 10
    frames, code = await frames_until_closed(ws)
    assert code == 4403 and revocation_error(frames)["reason"] == "token_revoked"
    assert api(n1, "GET", "rtc/ice-servers", oldest).status_code == 401
    assert all(api(n2, "GET", "rtc/ice-servers", token).status_code == 200 for token in newer)
