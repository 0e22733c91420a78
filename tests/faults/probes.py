"""What every Redis fault test checks once Redis is back (or another one took over): the
probes that must work again on both nodes, and the parties they need (a DM across the nodes,
a room joined on both, a third user for AUTH and presence)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from qimclient import QimClient, QimError
from tests.core.conversation_helpers import create_group
from tests.harness.checker import History
from tests.harness.personas import Persona, TenantHandle, api_ok
from tests.harness.traffic import Device
from tests.rooms.room_helpers import create_room, join, room_send

RECOVERY_LIMIT_S = 60.0


@dataclass
class ProbeParties:
    """Alice on node 1 and Bob on node 2, with a DM and a room joined on both (node 1 holds
    the room's writer); Carol has a token for a probe device on each node."""

    alice: Persona
    bob: Persona
    carol: Persona
    a1: QimClient
    b2: QimClient
    conversation: str
    room: str

    def probes(self, nodes):  # type: ignore[no-untyped-def]
        return recovery_probes(self.a1, self.b2, self.carol, self.conversation, self.room, nodes)


async def group_traffic(tenant: TenantHandle, prefix: str, people: int, n1, n2):  # type: ignore[no-untyped-def]
    """`people` senders in one group, alternately preferring node 1 and node 2, and the checker
    their traffic is recorded in: (group, members for the checker, history, devices)."""
    personas = [tenant.persona(f"{prefix}{i}") for i in range(people)]
    group = create_group(personas[0], *personas[1:])
    members = {f"{prefix}{i}": [group] for i in range(people)}
    history = History()
    devices = [
        await Device.open(f"{prefix}{i}", personas[i], [n1, n2] if i % 2 == 0 else [n2, n1], history)
        for i in range(people)
    ]
    return group, members, history, devices


async def probe_parties(tenant: TenantHandle, n1, n2) -> ProbeParties:  # type: ignore[no-untyped-def]
    alice, bob, carol = tenant.persona("alice"), tenant.persona("bob"), tenant.persona("carol")
    conversation = direct(alice, bob)
    room = create_room(alice)
    a1 = await alice.connect(n1, sync=False)
    b2 = await bob.connect(n2, sync=False)
    for node in (n1, n2):  # tokens now: the REST API needs no Redis, but keep an outage clean
        carol.token(f"probe-{node.node_id}", node)
    await join(a1, room)  # node 1 holds the writer
    await join(b2, room)
    return ProbeParties(alice, bob, carol, a1, b2, conversation, room)


async def wait_until(probe, errors: list[str], limit_s: float = RECOVERY_LIMIT_S) -> float:  # type: ignore[no-untyped-def]
    """Retry `probe` (an async callable answering True when served) until it succeeds;
    answers the seconds it took. The ERROR codes met meanwhile go to `errors`."""
    started = time.monotonic()
    while True:
        try:
            if await probe():
                return time.monotonic() - started
        except QimError as error:
            errors.append(error.code)
        except (TimeoutError, ConnectionError, OSError):
            pass
        assert time.monotonic() - started < limit_s, f"{probe.__name__} still failing after {limit_s} s"
        await asyncio.sleep(0.1)


def direct(alice: Persona, bob: Persona) -> str:
    body = api_ok(alice.tenant.node, "POST", "conversations", alice.token(), json={"kind": "direct", "member_user_ids": [bob.user_id]})
    return body["conversation_id"]


def recovery_probes(a1: QimClient, b2: QimClient, carol: Persona, conversation: str, room: str, nodes):  # type: ignore[no-untyped-def]
    """What must work again on both nodes once Redis is back: AUTH, a DM pushed across nodes,
    a room both ways, presence across nodes."""

    async def auth_on_both() -> bool:
        for node in nodes:
            client = await carol.connect(node, device_id=f"probe-{node.node_id}", sync=False)
            await client.close()
        return True

    async def dm_pushed_across() -> bool:
        ack = await a1.send_text(conversation, "after")
        while True:
            event = await b2.next_push(timeout=10, type="EVENT")
            if event["event"].get("message", {}).get("message_id") == ack["message_id"]:
                return True

    async def room_both_ways() -> bool:
        for sender, receiver in ((b2, a1), (a1, b2)):
            ack = await room_send(sender, room, "room after")
            while True:
                batch = await receiver.next_push(timeout=10, type="ROOM_BATCH")
                if ack["room_seq"] in [e["room_seq"] for e in batch["events"]]:
                    break
        return True

    async def presence_across() -> bool:
        if (await b2.subscribe_presence([carol.user_id]))[carol.user_id] is not False:
            return False  # an earlier probe's carol is still on her way out: try again
        probe = await carol.connect(nodes[0], device_id=f"probe-{nodes[0].node_id}", sync=False)
        try:
            while True:
                push = await b2.next_push(timeout=10, type="PRESENCE")
                if push["user_id"] == carol.user_id and push["online"]:
                    return True
        finally:
            await probe.close()

    return (auth_on_both, dm_pushed_across, room_both_ways, presence_across)
