"""The per-connection inbound frame budget (qim/gateway/inbound_budget.py): a frame over it answers
`rate_limited` with `retry_after_ms` and is not handled; a sustained flood closes 4430; other
connections are unaffected."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import websockets

from qim.gateway.inbound_budget import CLOSE_FLOODING, InboundBudget, req_id_of
from tests.conftest import QimDeployment, start_embedded

BUDGET_ENV = {
    # A burst of 10, then one frame every 2 s; more than 20 refusals in a minute close.
    "QIM_INBOUND_FRAME_BURST": "10", "QIM_INBOUND_FRAME_RATE": "0.5",
    "QIM_INBOUND_FLOOD_MAX_REFUSED": "20", "QIM_INBOUND_FLOOD_WINDOW_S": "60",
}


@pytest.fixture(scope="module")
def budgeted(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env=BUDGET_ENV)
    yield deployment
    deployment.stop()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_refills_at_its_rate_and_counts_refusals_per_window() -> None:
    clock = FakeClock()
    budget = InboundBudget(clock=clock, rate=2, burst=3, max_refused=2, window_s=10)
    assert [budget.take().allowed for _ in range(3)] == [True, True, True]
    refused = budget.take()
    assert (refused.allowed, refused.retry_after_ms, refused.close) == (False, 500, False)
    clock.now += 0.5  # one token back
    assert budget.take().allowed
    assert not budget.take().close  # second refusal in the window
    assert budget.take().close  # third: past max_refused
    clock.now += 10  # a new window, a full bucket
    assert [budget.take().allowed for _ in range(3)] == [True, True, True]
    assert not budget.take().close


def test_a_refusal_echoes_a_string_req_id_only() -> None:
    assert req_id_of('{"type": "SEND", "req_id": "r7", "payload": {"deep": [1, 2]}}') == "r7"
    assert req_id_of('{"type": "PING", "req_id": 7}') is None
    deep = '{"req_id": "r8", "x": ' + "[" * 60_000 + "]" * 60_000 + "}"
    assert [req_id_of(t) for t in ("{not json", "[1]", '{"type": "PING"}', None, deep)] == [None] * 5


async def open_authenticated(deployment: QimDeployment, name: str):  # type: ignore[no-untyped-def]
    persona = deployment.tenants["acme"].persona(name)
    ws = await websockets.connect(deployment.node.ws_url, max_size=None)
    await ws.send(json.dumps({"type": "AUTH", "token": persona.token(), "device_id": "phone"}))
    assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "AUTH_OK"
    return ws


async def replies_until_close(ws, timeout: float = 30) -> tuple[list[dict], int]:  # type: ignore[no-untyped-def]
    frames = []
    try:
        while True:
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), timeout)))
    except websockets.ConnectionClosed as closed:
        return frames, closed.rcvd.code if closed.rcvd else -1


async def test_over_budget_frames_are_refused_not_handled_and_the_socket_stays(budgeted: QimDeployment) -> None:
    ws = await open_authenticated(budgeted, "eager")
    for n in range(20):
        await ws.send(json.dumps({"type": "PING", "req_id": f"p{n}"}))
    replies = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(20)]
    pongs = [r for r in replies if r["type"] == "PONG"]
    refused = [r for r in replies if r["type"] == "ERROR"]
    assert [r["req_id"] for r in pongs[:10]] == [f"p{n}" for n in range(10)]  # the burst
    assert len(pongs) + len(refused) == 20 and len(refused) >= 3  # however slowly they were handled
    assert [r["req_id"] for r in replies] == [f"p{n}" for n in range(20)]  # each answer echoes its req_id
    for error in refused:
        assert error["code"] == "rate_limited"
        assert 0 < error["retry_after_ms"] <= 2000
    # Within the budget again after waiting as told: handled, socket still open.
    await asyncio.sleep(refused[-1]["retry_after_ms"] / 1000)
    answer = None
    for attempt in range(20):  # a loaded machine may deliver a refill late
        await ws.send(json.dumps({"type": "PING", "req_id": f"again{attempt}"}))
        answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if answer["type"] == "PONG":
            break
        await asyncio.sleep(answer["retry_after_ms"] / 1000)
    assert answer is not None and answer["type"] == "PONG"
    await ws.close()


async def test_a_sustained_flood_closes_4430_and_a_control_connection_is_unaffected(budgeted: QimDeployment) -> None:
    control = await open_authenticated(budgeted, "control")
    flooder = await open_authenticated(budgeted, "flooder")
    try:
        for n in range(60):
            await flooder.send(json.dumps({"type": "SYNC", "req_id": f"s{n}", "after_mailbox_seq": 0}))
    except websockets.ConnectionClosed:
        pass  # closed while still flooding: what is asserted below
    frames, code = await replies_until_close(flooder)
    assert code == CLOSE_FLOODING
    refused = [f for f in frames if f["type"] == "ERROR"]
    assert len(refused) >= 20 and {f["code"] for f in refused} == {"rate_limited"}
    assert sum(f["type"] == "SYNC_BATCH" for f in frames) >= 10
    stats = budgeted.node.stats(budgeted.tenants["acme"].admin_token)["counters"]
    assert stats["flooding_sockets_closed"] == 1
    for n in range(5):  # within the control's own budget
        await control.send(json.dumps({"type": "PING", "req_id": f"c{n}"}))
        answer = json.loads(await asyncio.wait_for(control.recv(), 10))
        assert (answer["type"], answer["req_id"]) == ("PONG", f"c{n}")
    await control.close()
