"""Real daphne nodes whose server tuning is partly or wholly stock (qim/server/tuning.py): a
library release the replacements were not verified on, QIM_SERVER_TUNING=off, a Unix-socket
listener; each still serves the whole protocol, reports what runs stock, and never sends a
client the text of an exception raised while its handshake is handled."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from qim.server.catalog import REPLACEMENTS
from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import TenantHandle, api_ok

FIXES = [replacement.name for replacement in REPLACEMENTS if replacement.kind == "fix"]
# Verified without daphne (autobahn alone), but for direct_writes: it needs direct_handshake_write.
DAPHNE_FREE = {r.name for r in REPLACEMENTS if "daphne" not in r.verified_on} - {"direct_writes"}


@pytest.fixture(scope="module")
def old_daphne(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """A tuned node whose daphne reads as release 0.0 (tests/harness/daphne_versions.py)."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_SERVER_TUNING": "on"})
    node = deployment.node
    node.stop()
    node.launcher = ("-m", "tests.harness.daphne_versions")
    node.start(extra_env={"QIM_TEST_PRETEND_VERSIONS": "daphne=0.0"})
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def stock(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_SERVER_TUNING": "off"})
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def tuned_with_unix_socket(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """A tuned node that also listens on a Unix socket (daphne -u, a second endpoint)."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_SERVER_TUNING": "on"})
    node = deployment.node
    node.stop()
    node.daphne_args = ("-u", str(work_dir / f"{node.node_id}.sock"))
    node.start()
    yield deployment
    deployment.stop()


def stats(deployment: QimDeployment) -> dict:
    return deployment.node.stats(deployment.tenants["acme"].admin_token)


def tuning_gauges(deployment: QimDeployment) -> dict[str, float]:
    text = httpx.get(f"{deployment.node.http_url}/metrics", timeout=10).text
    return {name: float(value) for name, value in re.findall(r'^qim_server_tuning\{name="(\w+)"\} (\S+)$', text, re.M)}


async def chat(tenant: TenantHandle, connect) -> None:  # type: ignore[no-untyped-def]
    """AUTH, a group SEND acknowledged, and the message pushed to the other member's socket:
    the protocol end to end over whatever `connect(token)` opens for alice."""
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    group = api_ok(tenant.node, "POST", "conversations", alice.token(),
                   json={"kind": "group", "member_user_ids": [bob.user_id]})["conversation_id"]
    receiver = await bob.connect()
    async with connect(alice.token()) as socket:
        await socket.send(json.dumps({"type": "AUTH", "token": alice.token(), "device_id": "phone"}))
        assert json.loads(await asyncio.wait_for(socket.recv(), 10))["type"] == "AUTH_OK"
        await socket.send(json.dumps({"type": "SEND", "req_id": "s", "conversation_id": group, "client_msg_id": "m1",
                                      "content_type": "text", "payload": {"text": "over the stock path"}}))
        ack = await reply_to(socket, "s")
        assert (ack["type"], ack["conversation_seq"]) == ("ACK", 1), ack
    event = await receiver.next_push(timeout=10, type="EVENT")
    assert event["event"]["message"]["payload"] == {"text": "over the stock path"}
    await receiver.close()


async def reply_to(socket, req_id: str) -> dict:  # type: ignore[no-untyped-def]
    """The answer to `req_id`, past the pushes before it (the echo of alice's own message)."""
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
        if frame.get("req_id") == req_id:
            return frame


def tcp(deployment: QimDeployment):  # type: ignore[no-untyped-def]
    return lambda token: websockets.connect(deployment.node.ws_url, compression=None)


def test_a_daphne_release_not_verified_leaves_its_replacements_stock_with_one_warning(old_daphne: QimDeployment) -> None:
    tuning = stats(old_daphne)["server_tuning"]
    expected_stock = {r.name for r in REPLACEMENTS} - DAPHNE_FREE
    assert tuning["mode"] == "on"
    assert set(tuning["installed"]) == DAPHNE_FREE >= {"connect_errors", "small_frame_unmask"}
    assert set(tuning["stock"]) == expected_stock
    assert tuning["stock"]["lean_frames"] == "daphne 0.0 installed, verified on 4.2.3"
    assert tuning["stock"]["direct_writes"] == "needs direct_handshake_write, which runs stock"
    warnings = [line for line in old_daphne.node.log_path.read_text().splitlines() if "server tuning:" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings
    assert all(name in warnings[0] for name in expected_stock), warnings[0]
    gauges = tuning_gauges(old_daphne)
    assert gauges == {r.name: (1.0 if r.name in DAPHNE_FREE else 0.0) for r in REPLACEMENTS}


async def test_a_node_on_an_unverified_daphne_serves_the_protocol_through_autobahn(old_daphne: QimDeployment) -> None:
    before = stats(old_daphne)["counters"]
    await chat(old_daphne.tenants["acme"], tcp(old_daphne))
    after = stats(old_daphne)["counters"]
    assert after.get("frames_written_direct", 0) == before.get("frames_written_direct", 0) == 0
    assert after.get("websocket_upgrades_direct", 0) == 0
    assert after["frames_written_autobahn"] > before.get("frames_written_autobahn", 0)


def test_off_installs_only_the_fixes(stock: QimDeployment) -> None:
    tuning = stats(stock)["server_tuning"]
    assert (tuning["mode"], tuning["installed"]) == ("off", FIXES)
    assert set(tuning["stock"]) == {r.name for r in REPLACEMENTS if r.kind == "tuning"}
    assert set(tuning["stock"].values()) == {"QIM_SERVER_TUNING=off"}
    assert not [line for line in stock.node.log_path.read_text().splitlines() if "server tuning:" in line]
    assert tuning_gauges(stock) == {r.name: (1.0 if r.kind == "fix" else 0.0) for r in REPLACEMENTS}


async def test_off_serves_the_protocol_on_stock_daphne(stock: QimDeployment) -> None:
    await chat(stock.tenants["acme"], tcp(stock))
    counters = stats(stock)["counters"]
    assert counters.get("frames_written_direct", 0) == counters.get("frames_written_held", 0) == 0
    assert counters.get("websocket_upgrades_direct", 0) == 0
    assert counters.get("keepalive_by_kernel", 0) == counters.get("keepalive_by_frames", 0) == 0
    assert counters["frames_written_autobahn"] >= 3


async def test_a_unix_socket_listener_is_served_on_the_stock_paths(tuned_with_unix_socket: QimDeployment) -> None:
    """Documented (docs/operations.md): over a Unix socket every frame takes autobahn's path and
    the upgrade Twisted's; the protocol is the same."""
    deployment = tuned_with_unix_socket
    path = deployment.node.daphne_args[1]
    before = stats(deployment)["counters"]
    await chat(deployment.tenants["acme"],
               lambda token: websockets.unix_connect(path, uri="ws://localhost/ws/v1", compression=None))
    after = stats(deployment)["counters"]
    # Bob's socket came over TCP and took the direct upgrade; alice's over the Unix socket did not.
    assert after.get("websocket_upgrades_direct", 0) - before.get("websocket_upgrades_direct", 0) == 1
    # Alice's frames (AUTH_OK, ACK) went through autobahn; bob's EVENT over TCP took the direct path.
    assert after["frames_written_autobahn"] - before.get("frames_written_autobahn", 0) >= 2
    assert stats(deployment)["server_tuning"]["stock"] == {}


def upgrade_with(port: int, extra_header: bytes) -> bytes:
    key = base64.b64encode(os.urandom(16))
    return (b"GET /ws/v1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n\r\n" % (port, key, extra_header))


@pytest.mark.parametrize("deployment_name", ["stock", "old_daphne", "tuned_with_unix_socket"])
async def test_an_exception_building_the_scope_answers_a_bare_400(
    deployment_name: str, request: pytest.FixtureRequest
) -> None:
    """daphne decodes the offered subprotocols as ASCII inside onConnect; UTF-8 there raised,
    and autobahn answered `500 Internal server error: 'ascii' codec can't decode byte 0xc3
    ...`: the exception's text, on every listener and in both modes."""
    header = b"Sec-WebSocket-Protocol: \xc3\xa9t\xc3\xa9"
    deployment: QimDeployment = request.getfixturevalue(deployment_name)
    port = deployment.node.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(upgrade_with(port, header))
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    assert answer.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request", answer
    assert b"codec" not in answer and b"Error" not in answer and b"ascii" not in answer, answer
