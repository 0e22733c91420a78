"""Tenant walls in Redis: two tenants with the same user names, room id and call id on two
nodes; every per-user, per-room and per-call key carries the tenant, and neither tenant's
answers show the other's state."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from tests.conftest import QimDeployment
from tests.harness.personas import PASSWORD, Persona, TenantHandle, api_ok

_serial = itertools.count(1)
# Keys of channels-redis (qim:layer:...) hold node channels and global groups, no tenant's
# objects; the reaction merge windows are keyed by conversation id, a ULID unique across tenants.
# Every key naming a user, room or call: its tenant id comes right before the name.
TENANT_KEY = re.compile(
    r"^qim:(?:presence:(?:user|device|watch)|room:lease|rtc:call|rtc:active):(?P<tenant>\d+):"
    r"|^qim:rate:LIMITER/[a-z_]+/(?P<rate_tenant>\d+)/"
    # Login attempts are counted before the tenant is looked up (an unknown tenant must answer
    # like a known one), so their key names the tenant as the client gave it: its unique name.
    r"|^qim:rate:LIMITER/auth_token_rate_per_account/(?P<login_tenant>[^/]+)/"
)


def tenant_of(key: str, ids: dict[str, int]) -> int | None:
    match = TENANT_KEY.match(key)
    if match is None:
        return None
    if match.group("login_tenant"):
        return ids.get(match.group("login_tenant"))
    return int(match.group("tenant") or match.group("rate_tenant"))


def twin(handle: TenantHandle, name: str) -> Persona:
    api_ok(handle.node, "POST", "users", handle.admin_token, json={"username": name, "password": PASSWORD})
    return Persona(tenant=handle, user_id=name)


@pytest.fixture
def tenants(cluster: QimDeployment) -> Iterator[tuple[TenantHandle, TenantHandle]]:
    acme, globex = cluster.tenants["acme"], cluster.tenants["globex"]
    yield acme, globex


def tenant_ids(cluster: QimDeployment) -> dict[str, int]:
    return {name: tid for tid, name in cluster.db.query("SELECT id, name FROM qim_tenant")}


async def twin_traffic(handle: TenantHandle, node_index: int, cluster: QimDeployment, names: dict[str, str]):  # type: ignore[no-untyped-def]
    """The same traffic in a tenant: a call ringing, a room with messages, presence, a reaction."""
    node = cluster.nodes[node_index]
    caller, callee = twin(handle, names["caller"]), twin(handle, names["callee"])
    conversation = api_ok(node, "POST", "conversations", caller.token(node=node),
                          json={"kind": "direct", "member_user_ids": [callee.user_id]})["conversation_id"]
    api_ok(node, "POST", "rooms", caller.token(node=node), json={"room_id": names["room"]})
    a, b = await caller.connect(node=node), await callee.connect(node=node)
    await a.request("PRESENCE_SUB", user_ids=[callee.user_id])
    sent = await a.request("SEND", conversation_id=conversation, client_msg_id="m1", content_type="text",
                           payload={"text": f"{handle.name} says hi"})
    await b.request("REACT", conversation_id=conversation, conversation_seq=sent["conversation_seq"],
                    reaction_key="+1", action="add")
    await a.request("ROOM_JOIN", room_id=names["room"])
    await a.request("ROOM_SEND", room_id=names["room"], content_type="text", payload={"text": handle.name})
    await a.request("RTC_SIGNAL", conversation_id=conversation, target_user_id=callee.user_id,
                    call_id=names["call"], action="invite")
    return a, b, conversation


async def test_keys_carry_the_tenant_and_answers_stay_apart(cluster: QimDeployment, tenants) -> None:  # type: ignore[no-untyped-def]
    acme, globex = tenants
    n = f"{os.getpid()}x{next(_serial)}"
    names = {"caller": f"twa{n}", "callee": f"twb{n}", "room": f"twroom{n}", "call": f"twcall{n}"}
    try:
        await check_walls(cluster, names, await twin_traffic(acme, 0, cluster, names),
                          await twin_traffic(globex, 1, cluster, names))
    finally:
        await acme.close_clients()
        await globex.close_clients()


async def check_walls(cluster: QimDeployment, names: dict[str, str], acme_side, globex_side) -> None:  # type: ignore[no-untyped-def]
    (a_acme, b_acme, c_acme), (a_globex, b_globex, c_globex) = acme_side, globex_side
    ids = tenant_ids(cluster)

    redis = aioredis.Redis.from_url(cluster.env["QIM_REDIS_URL"], decode_responses=True)
    try:
        keys = [k async for k in redis.scan_iter("qim:*")]
        ringing = await redis.zrange("qim:rtc:ringing", 0, -1)
    finally:
        await redis.aclose()
    shared = set(names.values())
    named = [k for k in keys if any(s in k for s in shared)]
    assert named, keys
    by_kind: dict[str, set[int]] = {}
    for key in named:
        tenant = tenant_of(key, ids)
        assert tenant in ids.values(), f"{key} names a user, room or call without its tenant"
        by_kind.setdefault(key.rsplit(":", 2)[0] if key.startswith("qim:rate") else key.split(":")[2], set()).add(tenant)
    # The same names in both tenants: two keys of each kind, one per tenant (rate windows last
    # a second, so only the latest tenant's may be left: checked above, not counted here).
    for kind in ("user", "device", "watch", "lease", "call", "active"):
        assert by_kind.get(kind) == set(ids.values()), f"{kind}: {sorted(named)}"
    assert {f"{ids['acme']}:{names['call']}", f"{ids['globex']}:{names['call']}"} <= set(ringing)

    # Answers: each tenant sees its own state only.
    await b_globex.close()
    for client, expect in ((a_globex, False), (a_acme, True)):
        for _ in range(600):  # until globex's callee reads offline there (60 s at most); acme's stays online
            presence = (await client.request("PRESENCE_SUB", user_ids=[names["callee"]]))["presence"]
            if presence[names["callee"]] is expect:
                break
            await asyncio.sleep(0.1)
        assert presence == {names["callee"]: expect}
    replay = await a_acme.request("ROOM_REPLAY", room_id=names["room"], after_room_seq=0)
    assert [e["payload"]["text"] for e in replay["events"]] == ["acme"]
    invite = await b_acme.next_push(timeout=30, type="RTC_SIGNAL")
    assert (invite["call_id"], invite["from_user_id"]) == (names["call"], names["caller"])
    await a_acme.request("PING")
    assert "globex" not in str(b_acme.drain_pushes()) + str(a_acme.drain_pushes())
    for client, conversation in ((a_acme, c_acme), (a_globex, c_globex)):
        ended = await client.request("RTC_SIGNAL", conversation_id=conversation, target_user_id=names["callee"],
                                     call_id=names["call"], action="cancel")
        assert ended["state"] == "cancelled"
