"""Calls whose device vanishes (rtc/departures.py), over real sockets on the embedded default
and across two nodes, with rtc_disconnect_grace_s shortened to 2 s: the server ends the call
for the vanished party, tells the other side, records it once and frees both users at once;
a reconnect within the grace keeps the call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from qimclient import QimClient
from tests.conftest import QimDeployment
from tests.harness.personas import Persona
from tests.rtc.conftest import Rig, start_either
from tests.rtc.rtc_helpers import call_records, direct, new_call_id, next_signal, record_rows, rtc_pushes, signal

GRACE_S = 2.0
SHORT_GRACE = {"QIM_RTC_DISCONNECT_GRACE_S": str(GRACE_S)}
DISCONNECTED = {"reason": "disconnected"}


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def grace_deployment(request: pytest.FixtureRequest, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_either(request, work_dir, SHORT_GRACE)
    yield deployment
    deployment.stop()


@pytest.fixture
async def rig(grace_deployment: QimDeployment) -> AsyncIterator[Rig]:
    tenant = grace_deployment.tenants["acme"]
    yield Rig(grace_deployment, tenant)
    await tenant.close_clients()


def vanish(client: QimClient) -> None:
    """No close frame, no hangup: what a crashed app or a dead network looks like to the server."""
    client._ws.transport.abort()  # type: ignore[union-attr]


async def accepted_call(rig: Rig, alice: Persona, bob: Persona, conversation: str) -> tuple[QimClient, QimClient, str]:
    a = await alice.connect(rig.caller_node)
    b = await bob.connect(rig.callee_node)
    call = new_call_id()
    await signal(a, conversation, bob, call, "invite")
    assert (await next_signal(b))["action"] == "invite"
    assert (await signal(b, conversation, alice, call, "accept"))["state"] == "accepted"
    assert (await next_signal(a))["action"] == "accept"
    return a, b, call


@pytest.mark.parametrize("who", ["caller", "callee"])
async def test_a_party_vanishing_mid_call_hangs_up_for_the_other_and_frees_both(rig: Rig, who: str) -> None:
    alice, bob, carol = (rig.tenant.persona(n) for n in ("alice", "bob", "carol"))
    conversation = direct(alice, bob)
    calling = time.monotonic()  # before the accept: the call's duration starts after this
    a, b, call = await accepted_call(rig, alice, bob, conversation)
    await asyncio.sleep(1.2)
    gone, stays, gone_persona, stays_persona = (a, b, alice, bob) if who == "caller" else (b, a, bob, alice)
    vanished = time.monotonic()
    vanish(gone)

    hangup = await next_signal(stays, timeout=60)
    hung_up = time.monotonic()
    assert hung_up - vanished >= GRACE_S - 0.3  # the grace was waited out, however late
    assert hangup == {
        "type": "RTC_SIGNAL", "conversation_id": conversation, "from_user_id": gone_persona.user_id,
        "from_device_id": None, "call_id": call, "action": "hangup", "signal_payload": DISCONNECTED,
    }
    # The call lasted from accept to the disconnect, not to the end of the grace: the server
    # saw the disconnect at least GRACE_S before the hangup reached us (rounded to seconds).
    (record,) = await call_records(stays, conversation)
    assert record["payload"]["outcome"] == "completed"
    assert 1 <= record["payload"]["duration_s"] <= round(hung_up - GRACE_S - calling), (record, hung_up - calling)
    assert record_rows(rig.deployment, call) == 1

    # Neither is busy: the one who stayed calls a third user, the vanished one comes back and calls.
    third = direct(stays_persona, carol)
    c = await carol.connect(rig.callee_node)
    assert (await signal(stays, third, carol, new_call_id(), "invite"))["state"] == "ringing"
    dave = rig.tenant.persona("dave")
    back = await gone_persona.connect(rig.caller_node, device_id="laptop")
    assert (await signal(back, direct(gone_persona, dave), dave, new_call_id(), "invite"))["state"] == "ringing"
    assert (await next_signal(c))["action"] == "invite"
    await asyncio.sleep(0.3)
    assert rtc_pushes(stays) == [] and record_rows(rig.deployment, call) == 1


async def test_a_caller_vanishing_while_ringing_cancels_on_every_callee_device(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a, phone, tablet, call = await rig.ringing_on_two_devices(alice, bob, conversation)
    vanish(a)

    for client in (phone, tablet):
        cancel = await next_signal(client, timeout=GRACE_S + 5)
        assert (cancel["action"], cancel["from_user_id"], cancel["from_device_id"]) == ("cancel", alice.user_id, None)
        assert cancel["signal_payload"] == DISCONNECTED
    (record,) = await call_records(phone, conversation)
    assert (record["payload"]["outcome"], record["payload"]["duration_s"]) == ("cancelled", 0)
    assert record_rows(rig.deployment, call) == 1


async def test_a_reconnect_within_the_grace_keeps_the_call(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a, b, call = await accepted_call(rig, alice, bob, conversation)
    vanish(a)
    await asyncio.sleep(0.5)
    a2 = await alice.connect(rig.callee_node)  # the same device, through another node when there are two
    await asyncio.sleep(GRACE_S + 1)
    assert rtc_pushes(b) == [] and record_rows(rig.deployment, call) == 0

    await signal(a2, conversation, bob, call, "sdp", {"sdp": "after the reconnect"})
    assert (await next_signal(b))["signal_payload"] == {"sdp": "after the reconnect"}
    assert (await signal(b, conversation, alice, call, "hangup"))["state"] == "completed"
    assert (await next_signal(a2))["action"] == "hangup"
    assert record_rows(rig.deployment, call) == 1


async def test_a_ringing_callee_device_vanishing_leaves_the_call_ringing_for_the_others(rig: Rig) -> None:
    alice, bob = rig.tenant.persona("alice"), rig.tenant.persona("bob")
    conversation = direct(alice, bob)
    a, phone, tablet, call = await rig.ringing_on_two_devices(alice, bob, conversation)
    vanish(phone)
    await asyncio.sleep(GRACE_S + 1)
    assert rtc_pushes(a) == [] and rtc_pushes(tablet) == []

    assert (await signal(tablet, conversation, alice, call, "accept"))["state"] == "accepted"
    assert (await next_signal(a))["action"] == "accept"
    assert record_rows(rig.deployment, call) == 0
