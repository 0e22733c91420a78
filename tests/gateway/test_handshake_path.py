"""The opening handshake's response sent with one `send()` (qim/server/handshake_write.py),
daphne's access log stamped once a second (qim/server/access_log.py) and a plain upgrade
request handed straight to autobahn (qim/server/lean_upgrade.py), on a real daphne node over
raw sockets: the 101 arrives whole and the frames after it intact; a refused origin, an
oversize header block and a request that is no WebSocket are answered as before; HTTP on the
same port still works; the access log's lines are daphne's, byte for byte."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import io
import json
import os
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.utils import accept_key

from qim.server.access_log import log_action
from tests.conftest import QimDeployment, start_embedded

# daphne's NCSA-like line (daphne/access.py): host ident user [date] "request" status length
LINE = re.compile(r'^127\.0\.0\.1:\d+ - - \[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2}\] "(\S+) (\S+)" (\S+) (\S+)$')


@pytest.fixture(scope="module")
def node(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """An embedded node whose access log goes to a file of its own (JSON logs: the harness's
    --access-log), line-buffered by daphne, so the test reads each line once written."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_LOG_FORMAT": "json", "QIM_ALLOWED_ORIGINS": "http://allowed.example"})
    yield deployment
    deployment.stop()


def upgrade(port: int, extra: str = "") -> tuple[bytes, str]:
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET /ws/v1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n")
    return request.encode(), key


async def read_all(reader: asyncio.StreamReader) -> bytes:
    """Everything until the server closes the socket."""
    return await asyncio.wait_for(reader.read(), 10)


def masked_text(payload: bytes) -> bytes:
    mask = os.urandom(4)
    return struct.pack("!BB", 0x81, 0x80 | len(payload)) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def test_the_101_arrives_whole_and_the_frames_after_it_intact(node: QimDeployment) -> None:
    port = node.nodes[0].port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request, key = upgrade(port)
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin1").split("\r\n")
        assert lines[0] == "HTTP/1.1 101 Switching Protocols", head
        assert f"Sec-WebSocket-Accept: {accept_key(key)}" in lines, head  # RFC 6455 §4.2.2
        # An unknown token: the node answers with a frame, then closes; both parse.
        writer.write(masked_text(json.dumps({"type": "AUTH", "token": "nope", "device_id": "d", "req_id": "a"}).encode()))
        b0, b1 = await asyncio.wait_for(reader.readexactly(2), 10)
        assert b0 == 0x81 and not b1 & 0x80
        size = b1 & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", await reader.readexactly(2))
        reply = json.loads(await asyncio.wait_for(reader.readexactly(size), 10))
        assert reply["type"] == "ERROR" and reply["req_id"] == "a", reply
    finally:
        writer.close()


async def test_a_refused_origin_gets_a_whole_403_then_the_close(node: QimDeployment) -> None:
    port = node.nodes[0].port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(upgrade(port, "Origin: http://evil.example\r\n")[0])
        answer = await read_all(reader)
        assert answer.startswith(b"HTTP/1.1 403 "), answer
        assert b"\r\n\r\n" in answer
    finally:
        writer.close()


async def test_an_oversize_header_block_and_a_bad_upgrade_are_refused(node: QimDeployment) -> None:
    port = node.nodes[0].port
    # Twisted's limits, before any WebSocket code: headers over 16 KiB in all get a 400, one
    # line over 16 KiB a closed socket without an answer (as before this path existed).
    for pad, expected in ((f"X-Pad-1: {'p' * 7000}\r\nX-Pad-2: {'p' * 7000}\r\nX-Pad-3: {'p' * 7000}\r\n",
                           b"HTTP/1.1 400 Bad Request"), (f"X-Pad: {'p' * 20000}\r\n", b"")):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(upgrade(port, pad)[0])
            answer = await read_all(reader)
            assert answer.split(b"\r\n")[0] == expected, answer[:200]
        finally:
            writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = upgrade(port)[0].replace(b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 7")
        writer.write(request)
        answer = await read_all(reader)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    finally:
        writer.close()


@pytest.mark.tuned
async def test_a_plain_upgrade_goes_straight_to_autobahn_any_other_through_daphne(node: QimDeployment) -> None:
    """qim/server/lean_upgrade.py: a boring request in one read skips Twisted's request and
    daphne's rewrite (counted); a header sent twice or a request cut across reads takes their
    path; each gets its 101 with the right accept key."""
    admin = (node.tenants.get("acme") or node.bootstrap("acme")).admin_token
    qim_node = node.nodes[0]
    port = qim_node.port

    def direct() -> int:
        return qim_node.stats(admin)["counters"].get("websocket_upgrades_direct", 0)

    before = direct()
    plain, plain_key = upgrade(port)
    twice, twice_key = upgrade(port, "X-A: 1\r\nX-A: 2\r\n")
    cut, cut_key = upgrade(port)
    for writes, key in (([plain.replace(b"/ws/v1 ", b"/ws/v1?x=1 ")], plain_key), ([twice], twice_key),
                        ([cut[:30], cut[30:]], cut_key)):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for part in writes:
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(0.2)  # the node reads each part on its own
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin1").split("\r\n")
            assert lines[0] == "HTTP/1.1 101 Switching Protocols", head
            assert f"Sec-WebSocket-Accept: {accept_key(key)}" in lines, head
        finally:
            writer.close()
    assert direct() == before + 1


async def test_http_on_the_same_port_still_answers(node: QimDeployment) -> None:
    async with httpx.AsyncClient() as http:
        health = await http.get(f"{node.nodes[0].http_url}/api/v1/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"


async def test_the_access_log_writes_daphnes_lines(node: QimDeployment) -> None:
    qim_node = node.nodes[0]
    access_log = qim_node.log_dir / f"{qim_node.node_id}.access.log"
    port = qim_node.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(upgrade(port)[0])
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    local_port = writer.get_extra_info("sockname")[1]
    writer.close()
    deadline = time.monotonic() + 10
    mine: list[re.Match[str]] = []
    while time.monotonic() < deadline:
        mine = [m for m in map(LINE.match, access_log.read_text().splitlines())
                if m and m.string.startswith(f"127.0.0.1:{local_port} ")]
        if len(mine) == 3:
            break
        await asyncio.sleep(0.1)
    assert [(m[1], m[2], m[3], m[4]) for m in mine] == [
        ("WSCONNECTING", "/ws/v1", "-", "-"), ("WSCONNECT", "/ws/v1", "-", "-"), ("WSDISCONNECT", "/ws/v1", "-", "-")]


def daphnes_generator() -> type:
    """daphne's AccessLogGenerator as daphne wrote it, whatever this process patched."""
    spec = importlib.util.find_spec("daphne.access")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AccessLogGenerator


@pytest.mark.parametrize("protocol, action, details", [
    ("http", "complete", {"client": "10.0.0.1:5", "method": "GET", "path": "/api/v1/health", "status": 200, "size": 32}),
    ("http", "complete", {"client": None, "method": "POST", "path": "/x", "status": 500, "size": 0}),
    ("websocket", "connecting", {"client": "127.0.0.1:4000", "path": "/ws/v1"}),
    ("websocket", "rejected", {"client": "127.0.0.1:4000", "path": "/ws/v1"}),
    ("websocket", "connected", {"client": None, "path": "/ws/v1"}),
    ("websocket", "disconnected", {"client": "127.0.0.1:4000", "path": "/ws/v1"}),
    ("websocket", "other", {"client": "127.0.0.1:4000", "path": "/ws/v1"}),
    ("http", "other", {"client": "127.0.0.1:4000", "path": "/"}),
])
def test_each_line_is_daphnes_byte_for_byte(protocol: str, action: str, details: dict) -> None:
    for _ in range(3):  # the two must format the same second
        theirs, ours = io.StringIO(), io.StringIO()
        second = int(time.time())
        daphnes_generator()(theirs)(protocol, action, details)
        log_action(type("Generator", (), {"stream": ours})(), protocol, action, details)
        if int(time.time()) == second:
            break
    assert ours.getvalue() == theirs.getvalue()
    assert (ours.getvalue() == "") == (action == "other")
