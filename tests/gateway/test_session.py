"""The WebSocket session over a real daphne: AUTH, close codes, ERROR frames, limits."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from tests.harness.personas import TenantHandle, api

LIMIT_NAMES = {
    "room_log_retention_minutes", "room_ring_max_items", "room_msg_rate",
    "room_outbound_frame_rate", "max_rooms_per_connection", "read_sync_merge_window_s",
    "recall_self_window_s", "edit_self_window_s", "max_custom_payload_bytes",
    "per_user_msg_rate", "per_user_reaction_rate", "reaction_detail_max_members",
    "reaction_detail_max_per_message", "reaction_push_merge_window_s", "rtc_ring_timeout_s",
    "rtc_voip_push_daily_quota", "turn_ttl_s",
}


async def recv_json(ws, timeout: float = 5.0) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def expect_close(ws, timeout: float = 5.0) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(ws.recv(), timeout)
    return closed.value.rcvd.code


async def test_auth_ok_carries_identity_and_every_limit(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    client = await alice.connect(device_id="phone")
    ok = client.auth_ok
    assert ok["user_id"] == alice.user_id
    assert ok["tenant"] == "acme"
    assert ok["device_id"] == "phone"
    assert ok["node_id"] == acme.node.node_id
    assert ok["connection_id"]
    assert isinstance(ok["server_time_ms"], int) and ok["server_time_ms"] > 1_600_000_000_000
    assert ok["registry_version"] >= 0
    assert LIMIT_NAMES <= set(ok["limits"])
    assert ok["limits"]["room_msg_rate"] == 20


async def test_bad_token_gets_error_then_4401(acme: TenantHandle) -> None:
    async with websockets.connect(acme.node.ws_url) as ws:
        await ws.send(json.dumps({"type": "AUTH", "token": "nope", "device_id": "phone", "req_id": "a"}))
        error = await recv_json(ws)
        assert (error["type"], error["code"], error["req_id"]) == ("ERROR", "unauthenticated", "a")
        assert await expect_close(ws) == 4401


async def test_token_of_another_device_is_refused(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    token = alice.token("phone")
    async with websockets.connect(acme.node.ws_url) as ws:
        await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": "laptop"}))
        assert (await recv_json(ws))["code"] == "unauthenticated"
        assert await expect_close(ws) == 4401


@pytest.mark.parametrize(
    "first_frame",
    ['{"type": "PING", "req_id": "1"}', "not json at all", '["AUTH"]', '{"type": "AUTH", "token": 5}'],
)
async def test_anything_but_auth_first_gets_4401(acme: TenantHandle, first_frame: str) -> None:
    async with websockets.connect(acme.node.ws_url) as ws:
        await ws.send(first_frame)
        assert (await recv_json(ws))["code"] == "unauthenticated"
        assert await expect_close(ws) == 4401


async def test_no_auth_in_time_closes_4408(acme: TenantHandle) -> None:
    async with websockets.connect(acme.node.ws_url) as ws:
        # QIM_AUTH_TIMEOUT_S is 3 in the test harness.
        assert await expect_close(ws, timeout=10) == 4408


async def authed_socket(tenant: TenantHandle):  # type: ignore[no-untyped-def]
    """A raw socket past AUTH, for tests that send what no well-behaved client would."""
    persona = tenant.persona("raw")
    ws = await websockets.connect(tenant.node.ws_url, max_size=None)
    await ws.send(json.dumps({"type": "AUTH", "token": persona.token("phone"), "device_id": "phone"}))
    assert (await recv_json(ws))["type"] == "AUTH_OK"
    return ws


@pytest.mark.parametrize(
    ("frame", "code", "req_id"),
    [
        ('{"type": "NO_SUCH_FRAME", "req_id": "r1"}', "unknown_type", "r1"),
        ('{"req_id": "r1"}', "unknown_type", "r1"),
        ('{"type": 12}', "unknown_type", None),
        ("{this is not json", "bad_frame", None),
        ("[1, 2, 3]", "bad_frame", None),
        ('{"type": "PRESENCE_SUB", "req_id": "r1", "user_ids": "bob"}', "bad_frame", "r1"),
        ('{"type": "PRESENCE_SUB", "req_id": "r1"}', "bad_frame", "r1"),
        ('{"type": "PRESENCE_SUB", "req_id": "r1", "user_ids": [1]}', "bad_frame", "r1"),
        ('{"type": "PING", "req_id": 7}', "bad_frame", None),
        ('{"type": "PING", "req_id": "r1", "x": "' + "y" * 70_000 + '"}', "too_large", None),
        (b"binary frames are not frames", "bad_frame", None),
    ],
)
async def test_bad_frames_get_an_error_and_the_connection_stays_up(
    acme: TenantHandle, frame: str | bytes, code: str, req_id: str | None
) -> None:
    ws = await authed_socket(acme)
    try:
        await ws.send(frame)
        error = await recv_json(ws)
        assert error["type"] == "ERROR"
        assert error["code"] == code
        assert error.get("req_id") == req_id
        assert error["message"]
        await ws.send(json.dumps({"type": "PING", "req_id": "after"}))
        pong = await recv_json(ws)
        assert (pong["type"], pong["req_id"]) == ("PONG", "after")
    finally:
        await ws.close()


async def test_frame_just_under_the_limit_is_handled(acme: TenantHandle) -> None:
    ws = await authed_socket(acme)
    try:
        padding = "y" * (64 * 1024 - 100)
        await ws.send(json.dumps({"type": "PING", "req_id": "big", "pad": padding}))
        assert (await recv_json(ws))["type"] == "PONG"
    finally:
        await ws.close()


async def test_origin_outside_the_list_is_refused(acme: TenantHandle) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(acme.node.ws_url, origin="http://evil.example"):
            pass
    assert refused.value.response.status_code == 403


async def test_listed_origin_and_no_origin_are_allowed(acme: TenantHandle) -> None:
    alice = acme.persona("alice")
    for origin in ("http://allowed.example", None):
        async with websockets.connect(acme.node.ws_url, origin=origin) as ws:
            await ws.send(json.dumps({"type": "AUTH", "token": alice.token(), "device_id": "phone"}))
            assert (await recv_json(ws))["type"] == "AUTH_OK"


async def test_a_token_of_one_tenant_never_speaks_for_another(
    acme: TenantHandle, globex: TenantHandle
) -> None:
    # Both tenants have a user called "admin"; acme's admin token is acme's admin only.
    acme_admin = await _auth_ok(acme, acme.admin_token, "bootstrap")
    globex_admin = await _auth_ok(globex, globex.admin_token, "bootstrap")
    assert (acme_admin["tenant"], acme_admin["user_id"]) == ("acme", "admin")
    assert (globex_admin["tenant"], globex_admin["user_id"]) == ("globex", "admin")
    # A user made by acme's admin exists in acme only: logging into globex with it fails.
    alice = acme.persona("alice")
    login = api(acme.node, "POST", "auth/token", json={
        "tenant": "globex", "username": alice.user_id, "password": "correct horse", "device_id": "phone"})
    assert login.status_code == 401
    assert login.json()["code"] == "unauthenticated"
    # And acme's token creates users in acme, never in globex.
    api(acme.node, "POST", "users", acme.admin_token, json={"username": "only-acme", "password": "pw"})
    login = api(acme.node, "POST", "auth/token", json={
        "tenant": "globex", "username": "only-acme", "password": "pw", "device_id": "phone"})
    assert login.status_code == 401


async def _auth_ok(tenant: TenantHandle, token: str, device_id: str) -> dict:
    async with websockets.connect(tenant.node.ws_url) as ws:
        await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": device_id}))
        return await recv_json(ws)
