"""Pushes and replies written straight to daphne's transport (qim/server/wire.py), over real
sockets: the frames are well-formed, keep their order with frames Twisted had to queue, a batch
larger than the socket buffers arrives whole, and a TLS socket takes autobahn's path."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import struct
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import websockets

from tests.conftest import QimDeployment, start_embedded
from tests.harness.qim_process import REPO, QimNode, process_env
from tests.harness.services import free_port
from tests.rooms.room_helpers import create_room, join, room_send

# The outbound limit raised so that a reader that pauses is not closed as too slow here.
FAST_ROOMS = {"QIM_ROOM_MSG_RATE": "1000", "QIM_ROOM_OUTBOUND_FRAME_RATE": "1000", "QIM_LOG_LEVEL": "ERROR",
               "QIM_MAX_OUTBOUND_BUFFER_BYTES": str(64 << 20)}
BIG = 30_000  # bytes of text per event
# 4.5 MB unread: more than the kernel takes (its send buffer grows to 4 MiB), so Twisted queues.
EVENTS = 150
# A replay of this many events (750 kB) is one frame under the 1 MiB that the nodes allow a
# message (autobahn's maxMessagePayloadSize applies to what daphne sends too).
REPLAYED = 25

class RawSocket:
    """A WebSocket client by hand, so the test sees every byte the server wrote and can stop
    reading (RFC 6455 §5.2: server frames unmasked, FIN set, RSV 0, shortest length form)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> "RawSocket":
        # A small limit: once 2 x 16 KiB sit unread, asyncio stops reading the socket.
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=16 * 1024)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET /ws/v1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    def send(self, frame: dict) -> None:
        payload = json.dumps(frame).encode()
        mask = os.urandom(4)
        size = len(payload)
        header = struct.pack("!BB", 0x81, 0x80 | size) if size <= 125 else struct.pack("!BBH", 0x81, 0x80 | 126, size)
        self.writer.write(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    async def recv(self, timeout: float = 10.0) -> dict:
        b0, b1 = await asyncio.wait_for(self.reader.readexactly(2), timeout)
        assert b0 == 0x81, f"not a final, unextended text frame: {b0:#x}"
        assert not b1 & 0x80, "a server frame must not be masked"
        size = b1 & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", await self.reader.readexactly(2))
            assert size > 125, "length not in its shortest form"
        elif size == 127:
            (size,) = struct.unpack("!Q", await self.reader.readexactly(8))
            assert size > 0xFFFF, "length not in its shortest form"
        payload = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        frame = json.loads(payload.decode("utf-8"))
        frame["_bytes"] = size
        return frame

    async def assert_nothing_more(self, seconds: float = 0.5) -> None:
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            extra = await asyncio.wait_for(self.reader.read(1), seconds)
            pytest.fail(f"unexpected bytes after the last frame: {extra!r}")

    def close(self) -> None:
        self.writer.close()


def counters(deployment: QimDeployment) -> dict[str, int]:
    return deployment.node.stats(deployment.tenants["acme"].admin_token)["counters"]


@pytest.fixture(scope="module")
def fast_rooms(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env=FAST_ROOMS)
    yield deployment
    deployment.stop()


@pytest.mark.tuned
async def test_frames_queued_behind_unread_data_arrive_whole_and_in_order(fast_rooms: QimDeployment) -> None:
    tenant = fast_rooms.tenants["acme"]
    sender, reader = tenant.persona("sender"), tenant.persona("reader")
    room = create_room(sender)
    s = await sender.connect()
    await join(s, room)
    raw = await RawSocket.open(fast_rooms.node.port)
    raw.send({"type": "AUTH", "token": reader.token(), "device_id": "phone"})
    assert (await raw.recv())["type"] == "AUTH_OK"
    raw.send({"type": "ROOM_JOIN", "req_id": "j", "room_id": room})
    assert (await raw.recv())["req_id"] == "j"
    before = counters(fast_rooms)

    # The reader reads nothing from here on until everything was written.
    texts = [f"{i:03d}" + chr(0x41 + i % 26) * BIG for i in range(EVENTS)]
    sent = [await room_send(s, room, text) for text in texts]
    raw.send({"type": "ROOM_REPLAY", "req_id": "replay", "room_id": room,
              "after_room_seq": sent[-REPLAYED - 1]["room_seq"]})
    raw.send({"type": "ROOM_SEND", "req_id": "after", "room_id": room, "content_type": "text",
              "payload": {"text": "after the replay"}})
    await asyncio.sleep(1.0)

    # Every live event and the ACK: the ACK of "after" and the tick carrying its event go out
    # independently, so either may come last.
    frames = []
    while (sum(len(f["events"]) for f in frames if f["type"] == "ROOM_BATCH" and "req_id" not in f) < EVENTS + 1
           or not any(f.get("req_id") == "after" for f in frames)):
        frames.append(await raw.recv())
    replies = [(f["type"], f.get("req_id")) for f in frames if "req_id" in f]
    assert replies == [("ROOM_BATCH", "replay"), ("ACK", "after")]  # in the order they were asked
    replay = next(f for f in frames if f.get("req_id") == "replay")
    assert replay["_bytes"] > REPLAYED * BIG
    assert [e["payload"]["text"] for e in replay["events"]] == texts[-REPLAYED:]
    ack = next(f for f in frames if f.get("req_id") == "after")
    live = [e for f in frames if f["type"] == "ROOM_BATCH" and "req_id" not in f for e in f["events"]]
    assert [e["room_seq"] for e in live] == [a["room_seq"] for a in sent] + [ack["room_seq"]]
    assert [e["payload"]["text"] for e in live] == texts + ["after the replay"]
    await raw.assert_nothing_more()
    raw.close()

    after = counters(fast_rooms)
    assert after.get("frames_written_queued", 0) > before.get("frames_written_queued", 0)
    assert after.get("frames_written_direct", 0) > before.get("frames_written_direct", 0)


async def test_pushes_and_replies_interleave_in_order_on_one_socket(fast_rooms: QimDeployment) -> None:
    tenant = fast_rooms.tenants["acme"]
    talker, other = tenant.persona("talker"), tenant.persona("other")
    room = create_room(talker)
    o = await other.connect()
    await join(o, room)
    raw = await RawSocket.open(fast_rooms.node.port)
    raw.send({"type": "AUTH", "token": talker.token(), "device_id": "phone"})
    assert (await raw.recv())["type"] == "AUTH_OK"
    raw.send({"type": "ROOM_JOIN", "req_id": "j", "room_id": room})
    joined = await raw.recv()
    assert (joined["type"], joined["req_id"], joined["events"]) == ("ROOM_BATCH", "j", [])
    for i in range(30):
        raw.send({"type": "ROOM_SEND", "req_id": f"r{i}", "room_id": room, "content_type": "text",
                  "payload": {"text": f"m{i}"}})
    others = [room_send(o, room, f"o{i}") for i in range(10)]
    other_acks = await asyncio.gather(*others)

    acks, events = [], []
    while len(acks) < 30 or len(events) < 40:
        frame = await raw.recv()
        if frame["type"] == "ACK":
            acks.append(frame)
        else:
            assert frame["type"] == "ROOM_BATCH" and "req_id" not in frame
            events += frame["events"]
    assert [a["req_id"] for a in acks] == [f"r{i}" for i in range(30)]
    seqs = [e["room_seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == 40
    assert set(seqs) == {a["room_seq"] for a in acks} | {a["room_seq"] for a in other_acks}
    await raw.assert_nothing_more()
    raw.close()


# --- TLS: autobahn's path --------------------------------------------------------------------

def self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1)).sign(key, hashes.SHA256()))
    key_path, cert_path = directory / "tls-key.pem", directory / "tls-cert.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


class TlsQimNode(QimNode):
    """A daphne node that also listens with TLS on `tls_port` (a second endpoint)."""

    tls_port: int = 0
    tls_files: tuple[Path, Path] | None = None

    def start(self, extra_env: dict[str, str] | None = None, timeout: float = 30.0) -> "QimNode":
        assert self.tls_files is not None
        key, cert = self.tls_files
        env = process_env({**self.env, "QIM_NODE_ID": self.node_id, **(extra_env or {})})
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
             "-e", f"ssl:{self.tls_port}:interface=127.0.0.1:privateKey={key}:certKey={cert}",
             "qim.asgi:application"],
            env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )
        self._wait_healthy(timeout)
        return self


@pytest.fixture(scope="module")
def with_tls(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    pytest.importorskip("OpenSSL", reason="Twisted's TLS endpoint needs pyOpenSSL")
    deployment = start_embedded(sqlite_template, work_dir, extra_env=FAST_ROOMS)
    plain = deployment.node
    plain.stop()
    node = TlsQimNode(node_id=plain.node_id, env=plain.env, log_dir=plain.log_dir, port=plain.port)
    node.tls_port, node.tls_files = free_port(), self_signed(work_dir)
    deployment.nodes[0] = node.start()
    for handle in deployment.tenants.values():
        handle.node = node
    yield deployment
    deployment.stop()


async def test_a_tls_socket_is_written_through_autobahn(with_tls: QimDeployment) -> None:
    tenant = with_tls.tenants["acme"]
    alice = tenant.persona("alice")
    room = create_room(alice)
    node = with_tls.node
    assert isinstance(node, TlsQimNode)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    before = counters(with_tls)
    async with websockets.connect(f"wss://127.0.0.1:{node.tls_port}/ws/v1", ssl=context, compression=None) as tls:
        await tls.send(json.dumps({"type": "AUTH", "token": alice.token(), "device_id": "phone"}))
        assert json.loads(await asyncio.wait_for(tls.recv(), 10))["type"] == "AUTH_OK"
        await tls.send(json.dumps({"type": "ROOM_JOIN", "req_id": "j", "room_id": room}))
        assert json.loads(await asyncio.wait_for(tls.recv(), 10))["req_id"] == "j"
        await tls.send(json.dumps({"type": "ROOM_SEND", "req_id": "s", "room_id": room, "content_type": "text",
                                   "payload": {"text": "x" * BIG}}))
        frames = [json.loads(await asyncio.wait_for(tls.recv(), 10)) for _ in range(2)]
        assert sorted(f["type"] for f in frames) == ["ACK", "ROOM_BATCH"]
        batch = next(f for f in frames if f["type"] == "ROOM_BATCH")
        assert [e["payload"]["text"] for e in batch["events"]] == ["x" * BIG]
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(tls.recv(), 0.5)
    after = counters(with_tls)
    assert after.get("frames_written_autobahn", 0) - before.get("frames_written_autobahn", 0) == 4
    assert after.get("frames_written_direct", 0) == before.get("frames_written_direct", 0)
