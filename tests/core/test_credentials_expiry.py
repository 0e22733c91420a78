"""Tokens expire after QIM_TOKEN_TTL_S: refused on REST (401) and AUTH (4401), and an open
socket whose token expires is closed (4403, reason token_expired) by its node's re-check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from tests.conftest import QimDeployment, start_embedded
from tests.core.credential_helpers import (
    WAIT_S,
    authenticated,
    frames_until_closed,
    login,
    new_token,
    revocation_error,
)
from tests.harness.personas import PASSWORD, api

# Long enough for a loaded machine to use a token right after issuing it; every wait below
# is for a condition, never for a time.
ENV = {"QIM_TOKEN_TTL_S": "10", "QIM_TOKEN_RECHECK_S": "0.5"}


@pytest.fixture(scope="module")
def deployment(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


async def test_an_expired_token_is_refused_everywhere_and_its_socket_closed(deployment: QimDeployment) -> None:
    acme = deployment.bootstrap("acme")  # a fresh admin token: the first one may have expired
    alice = acme.persona("alice")
    answer = login(acme.node, {"tenant": "acme", "username": alice.user_id, "password": PASSWORD, "device_id": "phone"})
    token, expires_at_ms = answer.json()["token"], answer.json()["expires_at_ms"]
    ws, auth_ok = await authenticated(acme.node, token, "phone")
    # Both say when: the login answer, from its clock; AUTH_OK, from the token's row.
    assert abs(auth_ok["token_expires_at_ms"] - expires_at_ms) < 5000
    assert 0 < expires_at_ms - auth_ok["server_time_ms"] <= 10_000
    assert api(acme.node, "GET", "rtc/ice-servers", token).status_code == 200
    frames, code = await frames_until_closed(ws)
    assert code == 4403
    error = revocation_error(frames)
    assert (error["code"], error["reason"]) == ("unauthenticated", "token_expired")
    refused = api(acme.node, "GET", "rtc/ice-servers", token)
    assert (refused.status_code, refused.json()["code"]) == (401, "unauthenticated")
    async with websockets.connect(acme.node.ws_url, open_timeout=WAIT_S) as again:
        await again.send(json.dumps({"type": "AUTH", "token": token, "device_id": "phone", "req_id": "a"}))
        frames, code = await frames_until_closed(again)
    assert code == 4401
    assert [(f["type"], f["code"], f["req_id"]) for f in frames] == [("ERROR", "unauthenticated", "a")]
    # A new login gets a new token that works (expiry is per token, not per user).
    assert api(acme.node, "GET", "rtc/ice-servers", new_token(alice, "phone")).status_code == 200
