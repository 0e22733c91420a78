"""GET /metrics on real daphne nodes: real traffic moves the counters it should (parsed with
prometheus_client's own parser), and the guards: a Bearer token when QIM_METRICS_TOKEN is set,
loopback clients only when it is not, never a tenant's credentials."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import httpx
import pytest
import websockets

from qimclient import QimError
from tests.conftest import QimDeployment, start_embedded, tenant_fixture
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle, api_ok
from tests.harness.qim_process import QimNode, sqlite_database
from tests.ops.metrics_helpers import Scrape, get_metrics, parse, scrape, scrape_until
from tests.rooms.room_helpers import create_room, join, room_send

TOKEN = "scrape-secret-0123456789"
# One SEND per user per 50 s: a user's second SEND is refused whatever the machine's speed.
METERED_ENV = {"QIM_METRICS_TOKEN": TOKEN, "QIM_PER_USER_MSG_RATE": "0.02"}
# The names outside checks rely on (issue #21), with their types.
REQUIRED = {
    "qim_connections": "gauge", "qim_frames_in": "counter", "qim_frames_out": "counter",
    "qim_errors": "counter", "qim_rate_limited": "counter", "qim_send_latency_seconds": "histogram",
}


@pytest.fixture(scope="module")
def metered(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env=METERED_ENV)
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def open_node(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """A node without a metrics token, listening on every address (so a test can come from a
    non-loopback one)."""
    db = sqlite_database(sqlite_template, work_dir, "metrics_open")
    env = {**db.env, "QIM_VAR_DIR": str(work_dir)}
    node = QimNode(node_id="metrics-open", env=env, log_dir=work_dir, bind="0.0.0.0")
    deployment = QimDeployment(db=db, nodes=[node], env=env)
    node.start()
    yield deployment
    deployment.stop()


acme = tenant_fixture("metered")


def url(node: QimNode, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{node.port}/metrics"


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


def test_the_required_names_are_there_with_their_types_and_all_are_prefixed(metered: QimDeployment) -> None:
    current = scrape(url(metered.node), TOKEN)
    for name, kind in REQUIRED.items():
        assert current.families.get(name) == kind, (name, current.families.get(name))
    assert all(name.startswith("qim_") for name in current.families), sorted(current.families)
    for name in ("qim_channel_full", "qim_node_messages_sent", "qim_room_writers", "qim_room_ring_items",
                 "qim_room_epoch_bumps", "qim_react_batches", "qim_reaction_updates",
                 "qim_db_transaction_seconds", "qim_fanout_seconds", "qim_connections_closed"):
        assert name in current.families, name


async def test_real_traffic_moves_the_counters_it_should(metered: QimDeployment, acme: TenantHandle) -> None:
    target = url(metered.node)
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    room = create_room(alice)
    before = scrape_until(target, TOKEN, lambda s: s.value("qim_connections") == 0)
    a, b = await alice.connect(), await bob.connect()
    seq = (await send_text(a, group, "one"))["conversation_seq"]
    await send_text(b, group, "two")
    with pytest.raises(QimError) as refused:
        await send_text(a, group, "three: over alice's rate")
    assert refused.value.code == "rate_limited"
    with pytest.raises(QimError) as unknown:
        await a.request("NO_SUCH_FRAME")
    assert unknown.value.code == "unknown_type"
    await join(a, room)
    await room_send(a, room, "hello room")
    await b.request("REACT", conversation_id=group, conversation_seq=seq, reaction_key="+1", action="add")

    after = scrape_until(target, TOKEN, lambda s: moved(before, s, "qim_reaction_updates_total") >= 1)
    assert after.value("qim_connections") == 2
    frames_in = {t: moved(before, after, "qim_frames_in_total", type=t)
                 for t in ("AUTH", "SEND", "ROOM_JOIN", "ROOM_SEND", "REACT")}
    assert frames_in == {"AUTH": 2, "SEND": 3, "ROOM_JOIN": 1, "ROOM_SEND": 1, "REACT": 1}
    assert moved(before, after, "qim_errors_total", code="rate_limited") == 1
    assert moved(before, after, "qim_errors_total", code="unknown_type") == 1
    assert moved(before, after, "qim_rate_limited_total", limit="per_user_msg_rate") == 1
    assert moved(before, after, "qim_send_latency_seconds_count") == 3  # two ACKs and the refusal
    assert moved(before, after, "qim_send_latency_seconds_sum") > 0
    # AUTH_OK x2, three SEND replies, the unknown_type ERROR, the MESSAGE pushes, room frames...
    assert moved(before, after, "qim_frames_out_total") >= 10
    assert moved(before, after, "qim_connections_authenticated_total") == 2
    assert after.value("qim_room_writers") >= 1 and after.value("qim_room_ring_items") >= 1
    assert moved(before, after, "qim_room_epoch_bumps_total") == 1
    assert moved(before, after, "qim_react_batches_total") == 1
    assert moved(before, after, "qim_reaction_updates_total") == 1
    # Each SEND's pushes went out after its commit; AUTH, SENDs and REACT ran DB calls.
    assert moved(before, after, "qim_fanout_seconds_count") >= 2
    assert moved(before, after, "qim_db_transaction_seconds_count") >= 5
    assert after.value("qim_send_latency_seconds_bucket", le="+Inf") == after.value("qim_send_latency_seconds_count")


async def test_closes_are_counted_by_close_code(metered: QimDeployment, acme: TenantHandle) -> None:
    target = url(metered.node)
    carol = acme.persona("carol")
    before = scrape_until(target, TOKEN, lambda s: s.value("qim_connections") == 0)
    async with websockets.connect(metered.node.ws_url) as stranger:
        await stranger.send(json.dumps({"type": "AUTH", "token": "not-a-token", "device_id": "phone"}))
        assert json.loads(await asyncio.wait_for(stranger.recv(), 30))["code"] == "unauthenticated"
        await asyncio.wait_for(stranger.wait_closed(), 30)
    assert stranger.close_code == 4401
    leaving = await websockets.connect(metered.node.ws_url)
    await leaving.send(json.dumps({"type": "AUTH", "token": carol.token(), "device_id": "phone"}))
    assert json.loads(await asyncio.wait_for(leaving.recv(), 30))["type"] == "AUTH_OK"
    await leaving.close(code=1001, reason="going away")

    after = scrape_until(
        target, TOKEN, lambda s: moved(before, s, "qim_connections_closed_total", code="1001") >= 1
        and moved(before, s, "qim_connections_closed_total", code="4401") >= 1
    )
    assert moved(before, after, "qim_connections_opened_total") == 2
    assert moved(before, after, "qim_connections_closed_total", code="4401") == 1
    assert moved(before, after, "qim_connections_closed_total", code="1001") == 1
    assert moved(before, after, "qim_errors_total", code="unauthenticated") == 1
    assert after.value("qim_connections") == 0


def test_with_a_token_only_its_bearer_reads_metrics(metered: QimDeployment, acme: TenantHandle) -> None:
    target = url(metered.node)
    admin = acme.admin_token
    refused = [
        get_metrics(target),
        get_metrics(target, "wrong-" + TOKEN),
        get_metrics(target, TOKEN[:-1]),
        get_metrics(target, admin),  # a tenant's credentials are never enough
        get_metrics(target, Authorization=f"Token {admin}"),
        get_metrics(target, Authorization=f"Basic {TOKEN}"),
        get_metrics(target, Authorization=TOKEN),
    ]
    for answer in refused:
        assert answer.status_code == 401, answer.text
        assert answer.json()["code"] == "unauthenticated" and answer.json()["message"]
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in answer.text
    post = httpx.post(target, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert (post.status_code, post.json()["code"]) == (405, "method_not_allowed")
    answer = get_metrics(target, TOKEN)
    assert answer.status_code == 200 and TOKEN not in answer.text and admin not in answer.text
    assert "qim_connections" in parse(answer.text).families
    # The JSON stats stay as they were, behind a tenant admin's token.
    assert "counters" in api_ok(metered.node, "GET", "node", admin)


def non_loopback_address() -> str:
    """This machine's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
    assert not address.startswith("127."), f"no non-loopback address to test from: {address}"
    return address


def test_without_a_token_only_loopback_clients_read_metrics(open_node: QimDeployment) -> None:
    node = open_node.node
    fresh = scrape(url(node))
    assert fresh.value("qim_connections") == 0
    # A node that has seen no traffic still shows the labelled counters, at 0.
    for name, label, value in (("qim_errors_total", "code", "internal"), ("qim_frames_in_total", "type", "SEND"),
                               ("qim_frames_in_total", "type", "ROOM_SEND"),
                               ("qim_rate_limited_total", "limit", "per_user_msg_rate"),
                               ("qim_connections_closed_total", "code", "4429")):
        assert fresh.samples[(name, frozenset({(label, value)}))] == 0, (name, value)
    # A request a reverse proxy on this host forwarded comes from loopback but is a stranger's.
    for header in ("X-Forwarded-For", "X-Real-IP", "Forwarded"):
        proxied = get_metrics(url(node), **{header: "203.0.113.9"})
        assert (proxied.status_code, proxied.json()["code"]) == (403, "forbidden"), header
    address = non_loopback_address()
    # The Host header names an allowed host; the connection comes from `address`.
    remote = get_metrics(url(node, address), Host="127.0.0.1")
    assert (remote.status_code, remote.json()["code"]) == (403, "forbidden"), remote.text
    assert "QIM_METRICS_TOKEN" in remote.json()["message"]
