"""GET rtc/ice-servers: TURN REST API credentials coturn's use-auth-secret accepts, checked
here by computing the HMAC independently."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import TenantHandle, api, api_ok

SECRET = "coturn-static-auth-secret"
URLS = ["turn:turn.example.net:3478?transport=udp", "turns:turn.example.net:5349?transport=tcp"]
TTL_S = 600


@pytest.fixture(scope="module")
def with_turn(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(
        sqlite_template, work_dir,
        extra_env={"QIM_TURN_SECRET": SECRET, "QIM_TURN_URLS": ",".join(URLS), "QIM_TURN_TTL_S": str(TTL_S)},
    )
    yield deployment
    deployment.stop()


def test_credentials_are_time_limited_and_verify_with_the_shared_secret(with_turn: QimDeployment) -> None:
    tenant = with_turn.tenants["acme"]
    alice = tenant.persona("alice")
    before = int(time.time())
    answer = api_ok(tenant.node, "GET", "rtc/ice-servers", alice.token())
    after = int(time.time())
    assert answer["ttl_s"] == TTL_S
    (server,) = answer["ice_servers"]
    assert server["urls"] == URLS
    expiry, tenant_name, user_id = server["username"].split(":")
    assert before + TTL_S <= int(expiry) <= after + TTL_S
    assert (tenant_name, user_id) == ("acme", alice.user_id)
    expected = base64.b64encode(
        hmac.new(SECRET.encode(), server["username"].encode(), hashlib.sha1).digest()
    ).decode()
    assert server["credential"] == expected


def test_credentials_need_a_token(with_turn: QimDeployment) -> None:
    response = api(with_turn.node, "GET", "rtc/ice-servers")
    assert response.status_code == 401


def test_without_a_turn_secret_the_list_is_empty(embedded: QimDeployment, acme: TenantHandle) -> None:
    answer = api_ok(acme.node, "GET", "rtc/ice-servers", acme.persona("bob").token())
    assert answer == {"ice_servers": [], "ttl_s": 86400}
