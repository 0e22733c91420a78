"""Tenant walls on every REST endpoint: another tenant's id in the path or body answers with
the same status and `{code, message}` as an id that never existed.

The cases are keyed by URL name and checked against the URLconf, so a new endpoint without a
wall case fails here.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.harness.personas import PASSWORD, Persona, TenantHandle, api, api_ok

_serial = itertools.count(1)
# Endpoints that take no id of a tenant's object.
NO_ID_ENDPOINTS = {"node-stats", "health", "ready", "rtc-ice-servers", "schema", "docs", "redoc", "push-vapid-public-key",
                   # Each acts on the caller's own tenant only (tests/push/test_push_credentials_api.py
                   # test_each_tenant_sees_and_changes_only_its_own).
                   "push-credentials", "push-credentials-apns", "push-credentials-fcm", "push-credentials-web",
                   "push-credentials-web-generate",
                   # The caller's own tenant (tests/core/test_retention.py test_the_retention_setting_over_rest).
                   "tenant-settings"}


@dataclass
class World:
    acme: TenantHandle
    alice: Persona
    bob: Persona
    acme_conversation: str
    acme_room: str
    gina: Persona
    globex_conversation: str
    globex_room: str
    globex_type: str
    globex_device: str


@pytest.fixture
def world(acme: TenantHandle, globex: TenantHandle) -> World:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    conversation = api_ok(acme.node, "POST", "conversations", alice.token(),
                          json={"kind": "group", "member_user_ids": [bob.user_id]})["conversation_id"]
    room = f"aroom-{next(_serial)}"
    api_ok(acme.node, "POST", "rooms", alice.token(), json={"room_id": room})
    gina, gus = globex.persona("gina"), globex.persona("gus")
    g_conversation = api_ok(globex.node, "POST", "conversations", gina.token(),
                            json={"kind": "group", "member_user_ids": [gus.user_id]})["conversation_id"]
    g_room = f"groom-{next(_serial)}"
    api_ok(globex.node, "POST", "rooms", gina.token(), json={"room_id": g_room})
    g_type = f"globex.card{next(_serial)}.v1"
    api_ok(globex.node, "POST", "registry/types", globex.admin_token,
           json={"custom_type": g_type, "delivery_class": "persistent"})
    g_device = f"gdevice-{next(_serial)}"
    gina.token(g_device)
    return World(acme, alice, bob, conversation, room, gina, g_conversation, g_room, g_type, g_device)


def api_v1_url_names() -> set[str]:
    def walk(patterns: list[Any]) -> set[str]:
        names: set[str] = set()
        for p in patterns:
            if isinstance(p, URLResolver):
                names |= walk(p.url_patterns)
            elif isinstance(p, URLPattern) and p.name:
                names.add(p.name)
        return names

    api_v1 = next(p for p in get_resolver("qim.urls").url_patterns if str(p.pattern) == "api/v1/")
    return walk(api_v1.url_patterns)


# A request for an id: (method, path, token, json body), given the world and the id.
Request = Callable[[World, str], tuple[str, str, str | None, Any]]
Case = tuple[Request, Callable[[World], str]]

CASES: dict[str, list[Case]] = {
    "auth-token": [(lambda w, u: ("POST", "auth/token", None, {"tenant": "acme", "username": u,
                                                                "password": PASSWORD, "device_id": "phone"}),
                    lambda w: w.gina.user_id)],
    "conversations": [(lambda w, u: ("POST", "conversations", w.alice.token(),
                                     {"kind": "group", "member_user_ids": [u]}), lambda w: w.gina.user_id),
                      (lambda w, u: ("POST", "conversations", w.alice.token(),
                                     {"kind": "direct", "member_user_ids": [u]}), lambda w: w.gina.user_id)],
    "conversation": [(lambda w, c, m=m: (m, f"conversations/{c}", w.alice.token(),
                                         {"title": "x"} if m == "PATCH" else None),
                      lambda w: w.globex_conversation) for m in ("GET", "PATCH")],
    "members": [(lambda w, c: ("POST", f"conversations/{c}/members", w.alice.token(),
                               {"user_ids": [w.bob.user_id]}), lambda w: w.globex_conversation),
                (lambda w, c: ("GET", f"conversations/{c}/members", w.alice.token(), None),
                 lambda w: w.globex_conversation),
                (lambda w, u: ("POST", f"conversations/{w.acme_conversation}/members", w.alice.token(),
                               {"user_ids": [u]}), lambda w: w.gina.user_id)],
    "member": [(lambda w, c: ("DELETE", f"conversations/{c}/members/{w.alice.user_id}", w.alice.token(), None),
                lambda w: w.globex_conversation),
               (lambda w, u: ("DELETE", f"conversations/{w.acme_conversation}/members/{u}", w.acme.admin_token, None),
                lambda w: w.gina.user_id),
               (lambda w, c: ("PATCH", f"conversations/{c}/members/{w.alice.user_id}", w.alice.token(),
                              {"tier": "full"}), lambda w: w.globex_conversation),
               (lambda w, u: ("PATCH", f"conversations/{w.acme_conversation}/members/{u}", w.alice.token(),
                              {"role": "admin"}), lambda w: w.gina.user_id)],
    "device-push": [(lambda w, d: ("POST", f"devices/{d}/push", w.alice.token(),
                                   {"platform": "ios", "push_token": "t"}), lambda w: w.globex_device)],
    "moderation-recall": [(lambda w, c: ("POST", "moderation/recall", w.acme.admin_token,
                                         {"conversation_id": c, "conversation_seq": 1}),
                           lambda w: w.globex_conversation)],
    "room": [(lambda w, r: ("GET", f"rooms/{r}", w.alice.token(), None), lambda w: w.globex_room)],
    "room-promote": [(lambda w, r: ("POST", f"rooms/{r}/promote", w.acme.admin_token, {}),
                      lambda w: w.globex_room),
                     (lambda w, u: ("POST", f"rooms/{w.acme_room}/promote", w.acme.admin_token,
                                    {"member_user_ids": [u]}), lambda w: w.gina.user_id)],
    "registry-type": [(lambda w, t, m=m: (m, f"registry/types/{t}", w.acme.admin_token,
                                          {"preview_template": "x"} if m in ("PUT", "PATCH") else None),
                       lambda w: w.globex_type) for m in ("GET", "PUT", "PATCH", "DELETE")],
    "user-deactivate": [(lambda w, u: ("POST", f"users/{u}/deactivate", w.acme.admin_token, None),
                         lambda w: w.gina.user_id)],
    "user-export": [(lambda w, u: ("GET", f"users/{u}/export", w.acme.admin_token, None), lambda w: w.gina.user_id)],
    "user-erase": [(lambda w, u: ("POST", f"users/{u}/erase", w.acme.admin_token, None), lambda w: w.gina.user_id)],
    # Creations last: each makes acme's own object of the foreign name.
    "users": [(lambda w, u: ("POST", "users", w.acme.admin_token, {"username": u, "password": "pw-long-enough"}),
               lambda w: w.gina.user_id)],
    "rooms": [(lambda w, r: ("POST", "rooms", w.alice.token(), {"room_id": r}), lambda w: w.globex_room)],
    "registry-types": [(lambda w, t: ("POST", "registry/types", w.acme.admin_token,
                                      {"custom_type": t, "delivery_class": "persistent"}),
                        lambda w: w.globex_type)],
}


def test_every_endpoint_has_a_wall_case() -> None:
    assert set(CASES) | NO_ID_ENDPOINTS == api_v1_url_names()


def missing_like(foreign: str) -> str:
    """A never-existing id of the same shape (a custom type keeps its dots, a room its charset)."""
    for mine, never in (("globex", f"nev{next(_serial)}"), ("gina", "nobody"), ("groom", "nroom"), ("gdevice", "ndevice")):
        if mine in foreign:
            return foreign.replace(mine, never)
    return foreign[:-6] + "000000"  # a conversation id (a ULID) no one was given


def outcome(w: World, request: Request, the_id: str) -> tuple[int, Any]:
    method, path, token, body = request(w, the_id)
    response: httpx.Response = api(w.acme.node, method, path, token, **({"json": body} if body is not None else {}))
    data = response.json() if response.content else None
    if response.status_code < 300:
        # Created or changed: the same shape of answer (values differ by design: new ids, versions).
        return response.status_code, sorted(data) if isinstance(data, dict) else data
    return response.status_code, json.loads(json.dumps(data).replace(the_id, "<ID>"))


def test_another_tenants_id_answers_like_a_missing_one(world: World) -> None:
    checked = 0
    for name, cases in CASES.items():
        for request, foreign_of in cases:
            foreign = foreign_of(world)
            missing = missing_like(foreign)
            assert missing != foreign
            got_foreign, got_missing = outcome(world, request, foreign), outcome(world, request, missing)
            assert got_foreign == got_missing, f"{name}: {got_foreign} != {got_missing}"
            if got_foreign[0] >= 300:
                assert set(got_foreign[1]) == {"code", "message"}, name
            checked += 1
    assert checked == sum(len(c) for c in CASES.values())


def test_the_same_names_in_two_tenants_are_separate(world: World, globex: TenantHandle) -> None:
    """globex's type name created and changed in acme is acme's own: globex's stays as it was."""
    api_ok(world.acme.node, "POST", "registry/types", world.acme.admin_token,
           json={"custom_type": world.globex_type, "delivery_class": "persistent"})
    api_ok(world.acme.node, "PATCH", f"registry/types/{world.globex_type}", world.acme.admin_token,
           json={"preview_template": "acme's"})
    api_ok(world.acme.node, "DELETE", f"registry/types/{world.globex_type}", world.acme.admin_token)
    theirs = api_ok(globex.node, "GET", f"registry/types/{world.globex_type}", globex.admin_token)
    assert theirs["enabled"] is True and theirs["preview_template"] != "acme's"
    api_ok(world.acme.node, "POST", "rooms", world.alice.token(), json={"room_id": world.globex_room})
    assert api_ok(world.acme.node, "GET", f"rooms/{world.globex_room}", world.alice.token())["online_count"] == 0
