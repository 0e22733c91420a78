"""PRESENCE_SUB / PRESENCE over real sockets, on one node and across two."""

from __future__ import annotations

import pytest

from tests.harness.personas import TenantHandle


async def assert_no_push(client, seconds: float = 0.5) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TimeoutError):
        await client.next_push(timeout=seconds, type="PRESENCE")


async def test_presence_flips_when_the_last_connection_closes(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    watcher = await alice.connect()
    assert await watcher.subscribe_presence([bob.user_id]) == {bob.user_id: False}

    phone = await bob.connect(device_id="phone")
    assert await watcher.next_push(timeout=5, type="PRESENCE") == {
        "type": "PRESENCE", "user_id": bob.user_id, "online": True}
    laptop = await bob.connect(device_id="laptop")
    await assert_no_push(watcher)  # already online: no second PRESENCE

    await phone.close()
    await assert_no_push(watcher)  # the laptop still holds bob online
    await laptop.close()
    offline = await watcher.next_push(timeout=5, type="PRESENCE")
    assert (offline["user_id"], offline["online"]) == (bob.user_id, False)


async def test_subscribe_answers_current_state(acme: TenantHandle) -> None:
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    await bob.connect()
    watcher = await alice.connect()
    assert await watcher.subscribe_presence([bob.user_id, carol.user_id]) == {
        bob.user_id: True, carol.user_id: False}


async def test_presence_never_crosses_tenants(acme: TenantHandle, globex: TenantHandle) -> None:
    alice = acme.persona("alice")
    outsider = globex.persona("mallory")
    await outsider.connect()
    watcher = await alice.connect()
    # The same user id in another tenant is nobody here.
    assert await watcher.subscribe_presence([outsider.user_id]) == {outsider.user_id: False}


async def test_watchers_on_one_node_come_and_go(acme: TenantHandle) -> None:
    """The node stays a watcher of a user while any of its connections watches, stops when
    the last one unsubscribes, and becomes one again on a new subscription (the in-process
    directory's shared node sets, qim/node/presence.py)."""
    alice, carol, erin = acme.persona("alice"), acme.persona("carol"), acme.persona("erin")
    first, second = await alice.connect(), await carol.connect()
    assert await first.subscribe_presence([erin.user_id]) == {erin.user_id: False}
    assert await second.subscribe_presence([erin.user_id]) == {erin.user_id: False}
    await first.close()
    erin_phone = await erin.connect(device_id="phone")
    online = await second.next_push(timeout=30, type="PRESENCE")
    assert (online["user_id"], online["online"]) == (erin.user_id, True)

    await second.request("PRESENCE_UNSUB", user_ids=[erin.user_id])
    await erin_phone.close()
    await assert_no_push(second, 2.0)  # nobody on this node watches erin any more

    assert await second.subscribe_presence([erin.user_id]) == {erin.user_id: False}
    await erin.connect(device_id="laptop")
    again = await second.next_push(timeout=30, type="PRESENCE")
    assert (again["user_id"], again["online"]) == (erin.user_id, True)
