"""qimclient's registry awareness (C-6) against a real embedded node: a snapshot fetched on
connect and kept current by REGISTRY_UPDATED (since_version), a render decision on every
message handed to the app, and a SYNC batch mixing types the client does not know, or is too
old for, with text: placeholders for those, the cursor past the whole batch, no disconnect."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import pytest

import qimclient
from qimclient import QimClient, TypeRegistry, render_message, version_satisfies
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import Persona, TenantHandle, api_ok

QUIET = 0.3
_names = itertools.count(1)


def register(tenant: TenantHandle, preview: str, **fields: Any) -> str:
    name = f"acme.sdk{time.time_ns() % 10**9}n{next(_names)}.v1"
    body = {"custom_type": name, "preview_template": preview, "max_payload_bytes": 256, **fields}
    api_ok(tenant.node, "POST", "registry/types", tenant.admin_token, json=body)
    return name


def disable(tenant: TenantHandle, name: str) -> None:
    api_ok(tenant.node, "DELETE", f"registry/types/{name}", tenant.admin_token)


async def sdk_client(persona: Persona, device_id: str = "phone", **options: Any) -> QimClient:
    options.setdefault("reconnect", False)
    client = QimClient(persona.tenant.node.ws_url, persona.token(device_id), device_id, **options)
    await client.connect()
    persona.tenant.clients.append(client)
    return client


async def send(client: QimClient, group: str, content_type: str, payload: Any) -> dict:
    return await client.request("SEND", conversation_id=group, client_msg_id=f"reg-{time.time_ns()}",
                                content_type=content_type, payload=payload)


def spy_registry_gets(client: QimClient) -> list[dict]:
    """Every REGISTRY_GET the client sends, as sent."""
    sent: list[dict] = []
    real = client.request_frame

    async def recording(frame: dict, *, timeout: float | None = None) -> dict:
        if frame.get("type") == "REGISTRY_GET":
            sent.append(dict(frame))
        return await real(frame, timeout=timeout)

    client.request_frame = recording  # type: ignore[method-assign]
    return sent


async def until(predicate: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def renders(events: list[dict]) -> list[tuple[str, str, str | None]]:
    return [(e["message"]["render"]["mode"], e["message"]["render"]["text"], e["message"]["render"].get("reason"))
            for e in events if e["kind"] == "message"]


async def test_c6_a_batch_mixing_unknown_and_too_new_types_with_text_renders_placeholders_and_goes_through(
    acme: TenantHandle,
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    poll = register(acme, "[poll]")
    vote = register(acme, "[vote]", minimum_client_version="99")   # known, but too new for 1.1.0
    # The snapshot bob's phone holds (saved earlier): it knows these two, nothing newer.
    tablet = await sdk_client(bob, "tablet", sync=False)
    saved = TypeRegistry()
    saved.apply(await tablet.request("REGISTRY_GET"))
    assert {poll, vote} <= saved.known_types
    quiz = register(acme, "[quiz from {sender_id}]")               # after the snapshot: unknown

    a = await alice.connect(sync=False)
    sent = [
        ("text", {"text": "before"}), (poll, {"q": "lunch?"}), (quiz, {"q": 1}), ("text", {"text": "middle"}),
        (vote, {"choice": 2}), ("text", {"text": "after"}),
    ]
    for content_type, payload in sent:
        await send(a, group, content_type, payload)
    disable(acme, poll)  # its old messages keep rendering (natively, for a client that knows it)

    # Refresh off: the phone renders from the saved snapshot, whatever the server announces.
    phone = await sdk_client(bob, registry=saved, track_registry=False, sync_page_size=100)
    gets = spy_registry_gets(phone)
    await phone.wait_synced(timeout=10)
    events = phone.drain_events()
    assert [e["message"]["content_type"] for e in events] == [ct for ct, _ in sent]
    assert renders(events) == [
        ("native", "before", None),
        ("native", "[poll]", None),
        ("placeholder", f"[quiz from {alice.user_id}]", "unknown_type"),   # the server's preview
        ("native", "middle", None),
        ("placeholder", "[vote]", "client_too_old"),
        ("native", "after", None),
    ]
    assert [e["message"]["payload"] for e in events] == [p for _, p in sent]  # handed on untouched
    assert all(phone.render(e["message"]).as_dict() == e["message"]["render"] for e in events)

    # The whole batch went through: the cursor is past it, and it was one catch-up.
    assert phone.mailbox is not None
    assert phone.cursor == events[-1]["mailbox_seq"] == phone.mailbox.store.load()
    assert phone.mailbox.catch_ups == 1 and phone.mailbox.invalid_events == 0
    # No disconnect, and the session still answers.
    assert phone.reconnects == 0 and phone.is_connected and phone.close_code is None
    assert (await phone.conversations())["type"] == "CONVERSATION_LIST"
    assert gets == [] and phone.registry is saved and quiz not in phone.known_types
    with pytest.raises(TimeoutError):
        await phone.next_event(timeout=QUIET)

    # History renders the same way; a client new enough renders the vote natively.
    history = await phone.history(group)
    assert [m["render"]["mode"] for m in history] == ["native", "native", "placeholder", "native", "placeholder", "native"]
    newer = await sdk_client(bob, "desktop", client_version="99.0.1")
    await newer.wait_synced(timeout=10)
    assert renders(newer.drain_events()) == [
        ("native", "before", None), ("native", "[poll]", None), ("native", f"[quiz from {alice.user_id}]", None),
        ("native", "middle", None), ("native", "[vote]", None), ("native", "after", None),
    ]


async def test_a_tracking_client_fetches_on_connect_follows_registry_updated_and_keeps_disabled_types_native(
    acme: TenantHandle,
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    b = await sdk_client(bob)
    assert b.client_version == qimclient.__version__ == "1.1.0"
    await b.wait_synced(timeout=5)
    gets = spy_registry_gets(b)
    assert b.registry.loaded and b.registry.version == b.auth_ok["registry_version"]
    assert {"text", "qim.membership.v1", "qim.call_record.v1"} <= b.known_types
    assert b.registry_sync.fetches == 1
    before = b.registry.version

    sticker = register(acme, "[sticker]")
    await until(lambda: sticker in b.known_types)
    assert gets == [{"type": "REGISTRY_GET", "since_version": before}]
    assert b.registry.version > before and b.registry.get(sticker)["enabled"] is True

    a = await alice.connect(sync=False)
    await send(a, group, sticker, {"id": 7})
    event = await b.next_event(timeout=5)
    assert event["message"]["render"] == {"mode": "native", "text": "[sticker]"}
    pushed = (await b.next_push(timeout=5, type="EVENT"))["event"]
    assert pushed["mailbox_seq"] == event["mailbox_seq"] and pushed["message"]["render"]["mode"] == "native"

    changed: list[list[str]] = []
    b.on_registry_change(changed.append)
    disable(acme, sticker)
    await until(lambda: b.registry.get(sticker)["enabled"] is False)
    assert changed == [[sticker]] and sticker in b.known_types
    [message] = await b.history(group)
    assert message["render"] == {"mode": "native", "text": "[sticker]"}  # disabled, still known
    with pytest.raises(qimclient.QimError) as refused:
        await send(a, group, sticker, {"id": 8})
    assert refused.value.code == "unknown_custom_type"
    assert b.reconnects == 0


async def test_a_message_of_a_type_the_snapshot_lacks_triggers_one_lazy_fetch(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    b = await sdk_client(bob)
    await b.wait_synced(timeout=5)
    real_dispatch = b._dispatch

    def lose_registry_updated(message: str | bytes) -> None:
        # As when the message of a new type, via another node, overtakes the notice.
        if json.loads(message).get("type") != "REGISTRY_UPDATED":
            real_dispatch(message)

    b._dispatch = lose_registry_updated  # type: ignore[method-assign]
    b.registry_sync.min_interval = 0.0
    gets = spy_registry_gets(b)
    fresh = register(acme, "[fresh]")
    a = await alice.connect(sync=False)
    await send_text(a, group, "plain")
    await send(a, group, fresh, {})
    events = [await b.next_event(timeout=5), await b.next_event(timeout=5)]
    assert renders(events) == [("native", "plain", None), ("native", "[fresh]", None)]
    assert len(gets) == 1 and fresh in b.known_types  # text needed no fetch; the new type one


def test_render_decisions_and_version_comparison() -> None:
    registry = TypeRegistry()
    registry.apply({"registry_version": 4, "types": [
        {"custom_type": "acme.poll.v1", "preview_template": "[poll by {sender_id}]", "minimum_client_version": "",
         "enabled": True, "version": 3},
        {"custom_type": "acme.new.v1", "preview_template": "[new]", "minimum_client_version": "1.10", "version": 4},
        {"custom_type": 7}, "junk",
    ]})
    assert registry.version == 4 and registry.known_types == {"text", "acme.poll.v1", "acme.new.v1"}
    # An older answer does not overwrite a newer row; unknown fields ride along.
    registry.apply({"registry_version": 2, "types": [{"custom_type": "acme.poll.v1", "version": 1}]})
    assert registry.version == 4 and registry.get("acme.poll.v1")["version"] == 3

    def mode(message: Any, version: str = "1.1.0") -> tuple[str, str, str | None]:
        rendered = render_message(message, registry, version)
        return rendered.mode, rendered.text, rendered.reason

    room_event = {"content_type": "acme.poll.v1", "sender_id": "alice", "payload": {}}  # no preview
    assert mode(room_event) == ("native", "[poll by alice]", None)
    assert mode({"content_type": "acme.new.v1", "preview": "[new]"}) == ("placeholder", "[new]", "client_too_old")
    assert mode({"content_type": "acme.new.v1", "preview": "[new]"}, "1.10.0")[0] == "native"
    assert mode({"content_type": "acme.gone.v1", "payload": {}}) == ("placeholder", "[message]", "unknown_type")
    assert mode({"content_type": "text", "payload": {"text": "hi"}, "preview": "hi"}) == ("native", "hi", None)
    assert mode({"content_type": "text", "payload": None, "preview": "[recalled]", "state": "recalled"}) == (
        "placeholder", "[recalled]", "recalled")
    assert mode({"content_type": "text", "payload": "not an object"}) == ("placeholder", "[message]", "malformed")
    assert mode(None) == ("placeholder", "[message]", "malformed")
    assert mode({"content_type": 5, "preview": "x"}) == ("placeholder", "x", "malformed")

    assert version_satisfies("1.1.0", "") and version_satisfies("1.1.0", None)
    assert version_satisfies("1.1.0", "1.1") and version_satisfies("1.1", "1.1.0")
    assert version_satisfies("1.10.0", "1.9") and not version_satisfies("1.9.9", "1.10")
    assert not version_satisfies("1.1.0", "99") and version_satisfies("qimclient/2.0", "2")
    assert not version_satisfies("dev", "1") and not version_satisfies("1.1.0", "latest")


class ScriptedRegistry:
    """A tenant registry in memory, answering REGISTRY_GET like the server."""

    def __init__(self) -> None:
        self.version = 0
        self.rows: dict[str, dict] = {}
        self.asked: list[int] = []

    def add(self, name: str) -> None:
        self.version += 1
        self.rows[name] = {"custom_type": name, "preview_template": "[x]", "version": self.version}

    async def request(self, frame_type: str, /, **fields: Any) -> dict:
        assert frame_type == "REGISTRY_GET"
        since = fields["since_version"]
        self.asked.append(since)
        return {"type": "REGISTRY", "registry_version": self.version,
                "types": [r for r in self.rows.values() if r["version"] > since]}


async def test_registry_sync_asks_since_its_version_coalesces_and_starts_over_for_another_registry() -> None:
    server = ScriptedRegistry()
    server.add("acme.a.v1")
    server.add("acme.b.v1")
    sync = qimclient.RegistrySync(server, min_interval=0.0)  # type: ignore[arg-type]
    sync.announce(2)
    sync.announce(2)  # one fetch under way serves both
    await sync.ensure_current()
    assert server.asked == [0] and sync.registry.known_types == {"text", "acme.a.v1", "acme.b.v1"}
    server.add("acme.c.v1")
    sync.announce(3)
    await sync.ensure_current()
    assert server.asked == [0, 2] and "acme.c.v1" in sync.registry and sync.registry.version == 3
    await sync.ensure_current(["text", "acme.a.v1"])  # current, every type known: no request
    assert server.asked == [0, 2]
    await sync.ensure_current(["acme.never.v1"])      # unknown: one lazy look
    assert server.asked == [0, 2, 3]

    # Another registry behind the same client (a restored server): a lower version, start over.
    server.version, server.rows = 0, {}
    server.add("acme.z.v1")
    await sync.refresh()
    assert server.asked == [0, 2, 3, 3, 0]
    assert sync.registry.known_types == {"text", "acme.z.v1"} and sync.registry.version == 1
    assert not sync.stale

    quiet = qimclient.RegistrySync(server, auto=False)  # type: ignore[arg-type]
    quiet.announce(5)
    await quiet.ensure_current(["acme.z.v1"])
    assert server.asked == [0, 2, 3, 3, 0] and not quiet.registry.loaded
