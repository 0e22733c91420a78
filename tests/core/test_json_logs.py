"""Issue #21 item 3: with QIM_LOG_FORMAT=json a node logs one JSON object per line, and every
line logged while a frame is handled names the node, tenant, user, device, connection, frame
type and req_id, also lines from code that knows nothing of the connection (an action in an
ORM thread); the text default shows the same context compactly; no token ever appears."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import QimDeployment, start_embedded
from tests.core.conversation_helpers import create_group
from tests.harness.personas import PASSWORD
from tests.harness.traffic import wait_until

PATIENCE_S = 60
CLOSE_FLOODING = 4430
JSON_ENV = {
    "QIM_LOG_FORMAT": "json",
    # DEBUG: one line per handled frame (qim.gateway.frames), and every library's debug lines,
    # all of which must be JSON too.
    "QIM_LOG_LEVEL": "DEBUG",
    # A small inbound budget, so that a flood is refused and closed (a WARNING) after a few frames.
    "QIM_INBOUND_FRAME_BURST": "20",
    "QIM_INBOUND_FRAME_RATE": "1",
    "QIM_INBOUND_FLOOD_MAX_REFUSED": "3",
}


@pytest.fixture(scope="module")
def json_node(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=JSON_ENV)
    yield deployment
    deployment.stop()


async def answer(ws: ClientConnection, frame: dict[str, Any]) -> dict[str, Any]:
    """The reply to `frame` (pushes such as an echo of our own SEND are skipped)."""
    await ws.send(json.dumps(frame))
    while True:
        reply = json.loads(await asyncio.wait_for(ws.recv(), PATIENCE_S))
        if reply.get("req_id") == frame.get("req_id") or reply["type"] in ("AUTH_OK", "ERROR"):
            return reply


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the node's log as JSON (the harness's `==== start` markers aside): one
    that does not parse fails the test."""
    records = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("==== start"):
            try:
                records.append(json.loads(line))
            except ValueError:
                pytest.fail(f"a log line that is not JSON: {line!r}")
    return records


def context_of(record: dict[str, Any]) -> dict[str, Any]:
    return {key: record.get(key) for key in ("tenant", "user_id", "device_id", "connection_id", "type", "req_id")}


async def flood_until_closed(ws: ClientConnection) -> int:
    """Frames past the inbound budget until the node closes the socket; its close code."""
    try:
        for n in range(200):
            await ws.send(json.dumps({"type": "NOT_A_FRAME", "req_id": f"f{n}"}))
        while True:
            await asyncio.wait_for(ws.recv(), PATIENCE_S)
    except ConnectionClosed:
        pass
    await ws.wait_closed()
    return ws.close_code


async def test_gateway_lines_are_json_and_carry_the_connection_and_the_frame(json_node: QimDeployment) -> None:
    node, tenant = json_node.node, json_node.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    group = create_group(alice, bob)
    token = alice.token("phone")
    async with connect(node.ws_url) as ws:
        ok = await answer(ws, {"type": "AUTH", "token": token, "device_id": "phone", "req_id": "a1"})
        assert ok["type"] == "AUTH_OK"
        good = {"type": "SEND", "req_id": "s-good", "conversation_id": group, "client_msg_id": "c1",
                "content_type": "text", "payload": {"text": "hello"}}
        assert (await answer(ws, good))["type"] == "ACK"
        bad = await answer(ws, {"type": "SEND", "req_id": "s-bad", "conversation_id": group})
        assert (bad["type"], bad["code"]) == ("ERROR", "bad_frame")
        assert await flood_until_closed(ws) == CLOSE_FLOODING

    connection = {"tenant": "acme", "user_id": alice.user_id, "device_id": "phone",
                  "connection_id": ok["connection_id"]}
    await wait_until(lambda: any("as flooding" in r.get("message", "") for r in json_lines(node.log_path)),
                     PATIENCE_S, "the flooding WARNING logged")
    records = json_lines(node.log_path)
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys(), record
        assert record["node_id"] == node.node_id, record
    handled = {r["req_id"]: r for r in records if r["logger"] == "qim.gateway.frames"}
    assert context_of(handled["a1"]) == {**connection, "type": "AUTH", "req_id": "a1"}
    assert context_of(handled["s-good"]) == {**connection, "type": "SEND", "req_id": "s-good"}
    assert context_of(handled["s-bad"]) == {**connection, "type": "SEND", "req_id": "s-bad"}
    [flooding] = [r for r in records if "as flooding" in r["message"]]
    assert flooding["level"] == "WARNING"
    assert context_of(flooding) == {**connection, "type": None, "req_id": None}  # between frames
    # One socket only: no line names another, nor carries its context after it (the node's loops).
    assert {r.get("connection_id") for r in records} <= {None, ok["connection_id"]}
    text = node.log_path.read_text()
    assert token not in text and PASSWORD not in text


@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_a_line_logged_from_an_orm_thread_names_the_frame(
    sqlite_template: Path, work_dir: Path, log_format: str
) -> None:
    """QIM_FAULT=edit.after_log: the EDIT action, in an ORM thread, logs CRITICAL and exits the
    process; that line names the EDIT frame and its socket, though the action knows neither."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_LOG_FORMAT": log_format, "QIM_FAULT": "edit.after_log",
    })
    try:
        node, tenant = deployment.node, deployment.tenants["acme"]
        alice, bob = tenant.persona("alice"), tenant.persona("bob")
        group = create_group(alice, bob)
        async with connect(node.ws_url) as ws:
            ok = await answer(ws, {"type": "AUTH", "token": alice.token("phone"), "device_id": "phone"})
            sent = await answer(ws, {"type": "SEND", "req_id": "s1", "conversation_id": group, "client_msg_id": "c1",
                                     "content_type": "text", "payload": {"text": "hello"}})
            await ws.send(json.dumps({"type": "EDIT", "req_id": "e1", "conversation_id": group,
                                      "conversation_seq": sent["conversation_seq"], "payload": {"text": "edited"}}))
            with pytest.raises(ConnectionClosed):  # the process exits at the fault point
                await asyncio.wait_for(ws.recv(), PATIENCE_S)
        assert deployment.node.wait_exit(timeout=PATIENCE_S) == 137
        [line] = [line for line in node.log_path.read_text().splitlines() if "QIM_FAULT=edit.after_log" in line]
        if log_format == "json":
            record = json.loads(line)
            assert (record["level"], record["logger"], record["node_id"]) == ("CRITICAL", "qim.infra.faults", node.node_id)
            assert context_of(record) == {"tenant": "acme", "user_id": alice.user_id, "device_id": "phone",
                                          "connection_id": ok["connection_id"], "type": "EDIT", "req_id": "e1"}
        else:
            assert line.endswith(f"reached: exiting now [tenant=acme user={alice.user_id} device=phone "
                                 f"conn={ok['connection_id']} frame=EDIT req=e1]"), line
    finally:
        deployment.stop()
