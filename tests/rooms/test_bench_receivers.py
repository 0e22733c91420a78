"""The room benchmarks' receivers (bench/lean_ws.py, bench/room_cases.py) read every frame a
server writes, whether a read holds one whole frame (the fast path, issue 22) or several, a
part, a fragmented message or a ping; and the loss they report counts every committed message,
also one whose ACK timed out (it was negative then)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from lean_ws import connect  # noqa: E402
from loadgen import message_text, stamps_in  # noqa: E402
from room_cases import count_loss  # noqa: E402

WAIT_S = 30.0


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """An unmasked server frame, as a server writes it."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        return head + bytes([n]) + payload
    if n < 65536:
        return head + bytes([126]) + n.to_bytes(2, "big") + payload
    return head + bytes([127]) + n.to_bytes(8, "big") + payload


TEXTS = [b"a", b"x" * 125, b"y" * 126, b"z" * 300, b"w" * 65_535, b"v" * 70_000, "é ü".encode()]


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A server's writes in every shape a receiver's read can take: one whole frame per read,
    several frames in one, a frame in two reads, a ping between, a fragmented message."""
    request = await reader.readuntil(b"\r\n\r\n")
    key = next(line.split(b":", 1)[1].strip() for line in request.split(b"\r\n") if line.lower().startswith(b"sec-websocket-key"))
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.2)
    for text in TEXTS:  # alone
        writer.write(frame(0x1, text))
        await writer.drain()
        await asyncio.sleep(0.05)
    writer.write(b"".join(frame(0x1, text) for text in TEXTS) + frame(0x9, b"p"))  # together
    await writer.drain()
    await asyncio.sleep(0.05)
    split = frame(0x1, b"s" * 300)
    for part in (split[:3], split[3:150], split[150:]):  # a frame in three reads
        writer.write(part)
        await writer.drain()
        await asyncio.sleep(0.05)
    writer.write(frame(0x1, b"frag", fin=False))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(frame(0x0, b"mented", fin=False) + frame(0x0, b"!") + frame(0x1, b"end"))
    await writer.drain()
    pong = await asyncio.wait_for(reader.readexactly(2), WAIT_S)
    assert pong[0] == 0x8A  # the ping was answered, masked
    await asyncio.sleep(0.5)
    writer.close()


async def test_every_frame_arrives_whole_and_in_order_alone_or_together() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        client = await connect("127.0.0.1", port, "/", WAIT_S)
        got: list[bytes] = []
        done = asyncio.get_running_loop().create_future()

        def on_text(payload: bytes) -> None:
            got.append(payload)
            if payload == b"end" and not done.done():
                done.set_result(None)

        client.on_text = on_text
        await asyncio.wait_for(done, WAIT_S)
        await asyncio.sleep(0.2)
        client.abort()
    assert got == TEXTS + TEXTS + [b"s" * 300, b"fragmented!", b"end"]
    assert client.frames_received == len(got)


def test_each_event_of_a_frame_is_found_with_its_send_time_and_id() -> None:
    texts = [message_text(7), message_text(2, "3."), message_text(11)]
    merged = json.dumps({"type": "ROOM_BATCH", "events": [{"payload": {"text": t}} for t in texts], "note": "t=x i=1 "})
    found = stamps_in(merged.encode())
    assert [ident for _, ident in found] == [b"7", b"3.2", b"11"]
    assert [int(stamp) for stamp, _ in found] == [int(t[2:t.index(" ")]) for t in texts]
    assert stamps_in(b'{"type": "PONG", "text": "t= i=1 "}') == []


def test_a_message_acknowledged_and_missing_is_lost() -> None:
    seen = {b"1": 3, b"2": 2}
    assert count_loss(["1", "2", "3"], seen, 3) == {
        "expected": 9, "lost": 1 + 3, "duplicates": 0, "lost_pct": 44.4, "unacknowledged_but_delivered": 0}


def test_a_message_delivered_without_its_ack_is_owed_to_every_member_not_negative() -> None:
    # The ACK of message 3 timed out, but it was committed: two members got it, one did not.
    seen = {b"1": 3, b"2": 3, b"3": 2}
    loss = count_loss(["1", "2"], seen, 3)
    assert loss["lost"] == 1 and loss["expected"] == 9
    assert loss["unacknowledged_but_delivered"] == 1


def test_a_copy_too_many_is_a_duplicate_not_a_delivery() -> None:
    loss = count_loss(["1"], {b"1": 4}, 3)
    assert loss["lost"] == 0 and loss["duplicates"] == 1
