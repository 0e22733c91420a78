"""Offline push outbox: a PushTask per offline device with credentials per counted message."""

from __future__ import annotations

import asyncio
import json

from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import Persona, TenantHandle, api, api_ok


def register_push(persona: Persona, device_id: str) -> None:
    api_ok(persona.tenant.node, "POST", f"devices/{device_id}/push", persona.token(device_id),
           json={"platform": "ios", "push_token": f"apns-{persona.user_id}-{device_id}"})


def push_tasks(deployment: QimDeployment, persona: Persona, device_id: str | None = None) -> int:
    where = "user_id = (SELECT id FROM qim_user WHERE username = ?)"
    params: tuple = (persona.user_id,)
    if device_id is not None:
        where += " AND device_id = (SELECT d.id FROM qim_device d JOIN qim_user u ON u.id = d.user_id WHERE u.username = ? AND d.device_id = ?)"
        params += (persona.user_id, device_id)
    return deployment.db.count("qim_pushtask", where, params)


def badge(deployment: QimDeployment, persona: Persona) -> int:
    rows = deployment.db.query(
        "SELECT badge FROM qim_userbadgestate WHERE user_id = (SELECT id FROM qim_user WHERE username = ?)",
        (persona.user_id,),
    )
    return rows[0][0] if rows else 0


async def test_offline_devices_get_one_task_per_counted_message_online_ones_none(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    await check_offline_pushes(embedded, acme)


async def test_offline_pushes_and_badges_on_postgres(cluster: QimDeployment, cluster_acme: TenantHandle) -> None:
    """PostgreSQL finds the devices in the badges' statement (bump_badges_finding_devices)."""
    await check_offline_pushes(cluster, cluster_acme)


async def check_offline_pushes(embedded: QimDeployment, acme: TenantHandle) -> None:
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    register_push(bob, "phone")        # bob's phone: offline, with credentials
    register_push(bob, "tablet")       # bob's tablet: online, with credentials
    register_push(carol, "phone")      # carol: online
    dave.token("phone")                # dave: offline, but no credentials
    group = create_group(alice, bob, carol, dave)
    a = await alice.connect()
    await bob.connect(device_id="tablet")
    await carol.connect(device_id="phone")

    for i in range(3):
        await send_text(a, group, f"ping {i}")
    api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(),
           json={"user_ids": [acme.persona("erin").user_id]})  # membership: does not count
    await asyncio.sleep(0.2)

    assert push_tasks(embedded, bob, "phone") == 3
    assert push_tasks(embedded, bob, "tablet") == 0
    assert push_tasks(embedded, carol) == 0
    assert push_tasks(embedded, dave) == 0
    assert push_tasks(embedded, alice) == 0
    assert badge(embedded, bob) == 3 and badge(embedded, dave) == 3 and badge(embedded, alice) == 0
    payloads = embedded.db.query(
        "SELECT payload FROM qim_pushtask WHERE user_id = (SELECT id FROM qim_user WHERE username = ?) ORDER BY id",
        (bob.user_id,),
    )
    payload = payloads[-1][0] if isinstance(payloads[-1][0], str) else json.dumps(payloads[-1][0])  # PostgreSQL: jsonb
    assert '"badge": 3' in payload.replace('"badge":3', '"badge": 3')


async def test_push_credentials_only_for_your_own_devices(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    bob.token("phone")
    answer = api(acme.node, "POST", "devices/phone/push", alice.token("laptop"), json={"platform": "ios", "push_token": "t"})
    assert (answer.status_code, answer.json()["code"]) == (404, "not_found")
    bad = api(acme.node, "POST", "devices/laptop/push", alice.token("laptop"), json={"platform": "windows", "push_token": "t"})
    assert (bad.status_code, bad.json()["code"]) == (400, "bad_request")


async def test_forgotten_credentials_make_no_more_tasks(embedded: QimDeployment, acme: TenantHandle) -> None:
    """DELETE devices/{id}/push: the device's tokens go, so the next counted message queues
    nothing for it. The id names one of the caller's own devices; one never logged in is
    not found."""
    alice, bob = acme.persona("alice"), acme.persona("bob")
    register_push(bob, "phone")
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "before")
    assert push_tasks(embedded, bob, "phone") == 1

    refused = api(acme.node, "DELETE", "devices/never-logged-in/push", bob.token())
    assert (refused.status_code, refused.json()["code"]) == (404, "not_found")
    # A device id names one of the caller's own devices: alice clearing "phone" clears hers.
    assert api(acme.node, "DELETE", "devices/phone/push", alice.token()).status_code == 204
    assert push_tasks(embedded, bob, "phone") == 1
    await send_text(a, group, "still pushed")
    assert push_tasks(embedded, bob, "phone") == 2

    cleared = api(acme.node, "DELETE", "devices/phone/push", bob.token("tablet"))  # any device of bob's
    assert cleared.status_code == 204 and cleared.content == b""
    await send_text(a, group, "after")
    assert push_tasks(embedded, bob, "phone") == 2
    register_push(bob, "phone")  # registering again brings the pushes back
    await send_text(a, group, "again")
    assert push_tasks(embedded, bob, "phone") == 3


async def test_a_batch_pushes_each_offline_device_its_badge_as_of_each_message_on_postgres(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    """On PostgreSQL the badges' statement answers the new badges only of members with a
    push-capable device (qim/actions/mailbox.py); a batch of several SENDs still gives every
    member its whole badge, and each offline device's push the badge as of its message."""
    from tests.core.test_send_batches import conversation_lock_held
    from tests.harness.batches import counter, until_counted

    acme, node = cluster_acme, cluster.node
    alice, bob, carol, dave, erin, frank = (acme.persona(n) for n in ("alice", "bob", "carol", "dave", "erin", "frank"))
    register_push(bob, "phone")        # offline, with credentials
    register_push(carol, "phone")      # online, with credentials: no task, a badge all the same
    dave.token("phone")                # offline, no credentials
    group = create_group(alice, bob, carol, dave, erin, frank)
    a, c = await alice.connect(), await carol.connect(device_id="phone")
    e, f = await erin.connect(), await frank.connect()

    base, batches = counter(node, acme, "send_requests"), counter(node, acme, "send_batches")
    with conversation_lock_held(cluster.db, group):
        opener = asyncio.ensure_future(send_text(a, group, "opener"))
        await until_counted(node, acme, "send_requests", base + 1)
        rest = asyncio.gather(send_text(c, group, "c"), send_text(e, group, "e"), send_text(f, group, "f"))
        await until_counted(node, acme, "send_requests", base + 4)
    await rest, await opener
    assert counter(node, acme, "send_batches") - batches == 2  # the opener's, then the three

    assert (badge(cluster, bob), badge(cluster, dave), badge(cluster, carol), badge(cluster, alice)) == (4, 4, 3, 3)
    assert push_tasks(cluster, bob, "phone") == 4
    assert push_tasks(cluster, carol) == 0 and push_tasks(cluster, dave) == 0
    rows = cluster.db.query(
        "SELECT payload FROM qim_pushtask WHERE user_id = (SELECT id FROM qim_user WHERE username = ?)", (bob.user_id,),
    )
    payloads = [json.loads(p) if isinstance(p, str) else p for (p,) in rows]
    # Bob's badge was 0: the k-th message by seq carries badge k, in the batch as alone.
    assert [p["badge"] for p in sorted(payloads, key=lambda p: p["conversation_seq"])] == [1, 2, 3, 4]
