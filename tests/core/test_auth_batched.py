"""AUTH's token lookups are gathered into one query per burst (qim/gateway/auth_lookup.py):
many AUTHs at once, valid, revoked, expired, deactivated, of another device, unknown and of
another tenant, each get exactly the answer they would get alone; nothing is cached, so a
token revoked between two bursts stops authenticating at once. The lookup is one SQL statement
of its own (qim/queries/identity_rows.py), so it runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.conftest import QimDeployment, start_cluster, start_embedded
from tests.core.credential_helpers import WAIT_S, frames_until_closed, new_token
from tests.harness.personas import TenantHandle, api, api_ok

# A long TTL: the expired token is one whose row says it was issued long ago.
ENV = {"QIM_TOKEN_TTL_S": "3600", "QIM_AUTH_TOKEN_RATE_PER_ACCOUNT": "100/minute",
       "QIM_AUTH_TOKEN_RATE_PER_ADDRESS": "1000/minute"}
COPIES = 4  # each case this many times in one burst, so that lookups do run together


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def deployment(request: pytest.FixtureRequest, sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    if request.param == "sqlite":
        deployment = start_embedded(sqlite_template, work_dir, extra_env=ENV)
    else:
        deployment = start_cluster(*(request.getfixturevalue(name) for name in ("postgres", "pg_template", "redis_proc")),
                                   work_dir, nodes=1, extra_env=ENV)
    deployment.bootstrap("globex")
    yield deployment
    deployment.stop()


async def auth_burst(node: Any, cases: list[tuple[str, str]]) -> list[tuple[list[dict], int | None, Any]]:
    """Open a socket per (token, device_id), then send every AUTH at once; answers each
    socket's frames up to its AUTH answer (and, when refused, its close code) and the socket."""
    sockets = await asyncio.gather(*(websockets.connect(node.ws_url, open_timeout=WAIT_S) for _ in cases))
    await asyncio.gather(*(ws.send(json.dumps({"type": "AUTH", "req_id": f"a{i}", "token": token, "device_id": device}))
                           for i, (ws, (token, device)) in enumerate(zip(sockets, cases))))

    async def answer(ws: Any) -> tuple[list[dict], int | None, Any]:
        first = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
        if first["type"] == "AUTH_OK":
            return [first], None, ws
        rest, code = await frames_until_closed(ws)
        return [first, *rest], code, ws

    return list(await asyncio.gather(*(answer(ws) for ws in sockets)))


def expire(deployment: QimDeployment, token: str) -> None:
    """Backdate the token's row past QIM_TOKEN_TTL_S, as if it had been issued two hours ago."""
    import hashlib

    digest = hashlib.sha256(token.encode()).hexdigest()
    deployment.db.query("UPDATE qim_devicetoken SET created_at = '2000-01-01 00:00:00' WHERE digest = ? "
                        "RETURNING digest", (digest,))  # RETURNING: the harness fetches rows


def mixed_cases(deployment: QimDeployment) -> list[tuple[str, str, dict | None]]:
    """(token, device_id, what AUTH_OK must say or None for a refusal), every kind once."""
    acme, globex = deployment.tenants["acme"], deployment.tenants["globex"]
    alice, bob, carol, dave, erin = (acme.persona(n) for n in ("alice", "bob", "carol", "dave", "erin"))
    gina = globex.persona("gina")
    revoked, expired, deactivated = new_token(carol, "phone"), new_token(dave, "phone"), new_token(erin, "phone")
    assert api(acme.node, "DELETE", "auth/token", revoked).status_code == 204
    expire(deployment, expired)
    api_ok(acme.node, "POST", f"users/{erin.user_id}/deactivate", acme.admin_token)
    ok = lambda p, t, d: {"user_id": p.user_id, "tenant": t, "device_id": d}  # noqa: E731
    return [
        (new_token(alice, "phone"), "phone", ok(alice, "acme", "phone")),
        (new_token(alice, "laptop"), "laptop", ok(alice, "acme", "laptop")),
        (new_token(bob, "phone"), "phone", ok(bob, "acme", "phone")),
        (new_token(gina, "phone"), "phone", ok(gina, "globex", "phone")),
        (new_token(bob, "tablet"), "phone", None),  # bound to another device
        (revoked, "phone", None),
        (expired, "phone", None),
        (deactivated, "phone", None),
        (secrets.token_urlsafe(32), "phone", None),
    ]


@pytest.fixture
def acme(deployment: QimDeployment) -> TenantHandle:
    return deployment.tenants.get("acme") or deployment.bootstrap("acme")


async def test_a_burst_of_mixed_auths_answers_each_as_alone(deployment: QimDeployment, acme: TenantHandle) -> None:
    issued_from = time.time() * 1000
    cases = mixed_cases(deployment) * COPIES
    issued_until = time.time() * 1000
    before = acme.node.stats(acme.admin_token)["counters"]
    answers = await auth_burst(acme.node, [(token, device) for token, device, _ in cases])
    for i, ((token, device, expected), (frames, code, ws)) in enumerate(zip(cases, answers)):
        if expected is None:
            assert code == 4401, (i, frames)
            assert [(f["type"], f["code"], f["req_id"]) for f in frames] == [("ERROR", "unauthenticated", f"a{i}")]
            continue
        ok = frames[0]
        assert {k: ok[k] for k in expected} == expected, (i, ok)
        assert ok["req_id"] == f"a{i}"
        # The token's issue time as read from its row (SQLite's text, PostgreSQL's timestamptz).
        issued_ms = ok["token_expires_at_ms"] - int(ENV["QIM_TOKEN_TTL_S"]) * 1000
        assert issued_from - 2000 <= issued_ms <= issued_until + 2000, (i, ok)
        await ws.send(json.dumps({"type": "PING", "req_id": "p"}))  # the session works past AUTH
        assert json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["type"] == "PONG"
        await ws.close()
    after = acme.node.stats(acme.admin_token)["counters"]
    requests = after.get("auth_lookups_requests", 0) - before.get("auth_lookups_requests", 0)
    batches = after.get("auth_lookups_batches", 0) - before.get("auth_lookups_batches", 0)
    assert requests == len(cases)
    assert 1 <= batches <= requests


async def test_a_token_revoked_between_bursts_stops_authenticating(acme: TenantHandle) -> None:
    frank = acme.persona("frank")
    token = new_token(frank, "phone")
    first = await auth_burst(acme.node, [(token, "phone")] * 3)
    assert [frames[0]["type"] for frames, _, _ in first] == ["AUTH_OK"] * 3
    assert api(acme.node, "DELETE", "auth/token", token).status_code == 204
    # The open sockets are closed for it (4403), and the next burst is refused.
    for _, _, ws in first:
        _, code = await frames_until_closed(ws)
        assert code == 4403
    again = await auth_burst(acme.node, [(token, "phone")] * 3)
    assert [(frames[0]["code"], code) for frames, code, _ in again] == [("unauthenticated", 4401)] * 3
