"""A client's plain text frames are read without autobahn's per-frame calls
(qim/server/lean_frames.py); every other frame still goes through autobahn, on a real node over
a raw socket: fragments, a frame cut across reads, a control frame between text frames and a
frame of 1 KiB and more are answered as before, in order; invalid UTF-8, an unmasked frame and a
length that is not minimal get autobahn's close frame and nothing more (qim/server/protocol_errors.py)."""

from __future__ import annotations

import asyncio
import json
import os
import struct
from collections.abc import AsyncIterator

import pytest

from qim.server.unmask import xor_masked
from tests.conftest import QimDeployment
from tests.core.credential_helpers import WAIT_S
from tests.harness.raw_socket import OPCODE_PONG, OPCODE_TEXT, RawSocket, frames_in

OPCODE_CONTINUATION, OPCODE_PING = 0x0, 0x9


def frame(payload: bytes, opcode: int = OPCODE_TEXT, fin: bool = True, masked: bool = True, long_length: bool = False) -> bytes:
    """One client frame as a test wants it, rules bent where asked."""
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if masked else 0
    size = len(payload)
    if size >= 126 or long_length:
        head = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        head = struct.pack("!BB", first, mask_bit | size)
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ping(req_id: str, **extra: str) -> bytes:
    return json.dumps({"type": "PING", "req_id": req_id, **extra}).encode()


@pytest.fixture
async def authed(embedded: QimDeployment) -> AsyncIterator[RawSocket]:
    bob = embedded.tenants["acme"].persona("bob")
    sock = await RawSocket.open(embedded.nodes[0].port)
    await sock.send_frames({"type": "AUTH", "req_id": "a", "token": bob.token(), "device_id": "phone"})
    assert [reply["type"] for reply in await sock.read_texts(1)] == ["AUTH_OK"]
    yield sock
    sock.sock.close()


async def frames_until(sock: RawSocket, texts: int) -> list[tuple[int, bytes]]:
    """Server frames until `texts` text frames came, over as many reads as they take."""
    data = b""
    while True:
        data += await sock.read_once()
        try:
            frames = frames_in(data)
        except AssertionError:  # a frame cut across reads: read on
            continue
        if sum(opcode == OPCODE_TEXT for opcode, _ in frames) >= texts:
            return frames


def pong_ids(frames: list[tuple[int, bytes]]) -> list[str]:
    return [json.loads(payload)["req_id"] for opcode, payload in frames if opcode == OPCODE_TEXT]


async def test_frames_autobahn_still_reads_are_answered_in_order(authed: RawSocket) -> None:
    # A message in two fragments, a control ping between two plain frames, a 2 KiB frame.
    whole = ping("fragmented")
    await authed.write(frame(whole[:10], fin=False) + frame(whole[10:], opcode=OPCODE_CONTINUATION)
                       + frame(ping("before")) + frame(b"hi", opcode=OPCODE_PING) + frame(ping("after"))
                       + frame(ping("big", pad="x" * 2000)))
    frames = await frames_until(authed, 4)
    assert pong_ids(frames) == ["fragmented", "before", "after", "big"], frames
    assert (OPCODE_PONG, b"hi") in frames, frames
    # A plain frame cut across two reads.
    cut = frame(ping("cut"))
    await authed.write(cut[:4])
    await asyncio.sleep(0.2)  # the node reads the first part on its own
    await authed.write(cut[4:] + frame(ping("next")))
    assert pong_ids(await frames_until(authed, 2)) == ["cut", "next"]


async def frames_until_dropped(sock: RawSocket) -> list[tuple[int, bytes]]:
    data = b""
    while True:
        try:
            chunk = await asyncio.wait_for(sock.loop.sock_recv(sock.sock, 1 << 20), WAIT_S)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return frames_in(data)


@pytest.mark.parametrize("bad, code", [
    pytest.param(frame(b'{"type": "PING", "req_id": "\xff"}'), 1007, id="invalid UTF-8"),
    pytest.param(frame(ping("bare"), masked=False), 1002, id="unmasked"),
    pytest.param(frame(ping("long"), long_length=True), 1002, id="a length that is not minimal"),
])
async def test_bad_frames_get_autobahns_close_frame_and_nothing_after(authed: RawSocket, bad: bytes, code: int) -> None:
    """autobahn's path decides, and answers with the close code RFC 6455 §7.4.1 names
    (qim/server/protocol_errors.py), then closes the socket; the frame after is never served."""
    await authed.write(frame(ping("first")))
    assert pong_ids(await frames_until(authed, 1)) == ["first"]
    await authed.write(bad + frame(ping("never")))
    answered = await frames_until_dropped(authed)
    assert [opcode for opcode, _ in answered] == [0x8], answered
    assert int.from_bytes(answered[0][1][:2], "big") == code


def test_unmasking_is_the_rfcs_xor() -> None:
    for size in (0, 1, 3, 4, 5, 125, 126, 1023):
        mask, payload = os.urandom(4), os.urandom(size)
        assert xor_masked(mask, payload) == bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
