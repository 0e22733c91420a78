"""What a socket holds while it serves the frames of one read is bounded (qim/server/wire.py
`HELD_BYTES_MAX`) and is not the peer's unread bytes: big replies to frames read at once go out
as they pass the bound, in order, and a socket whose slow-socket bound
(QIM_MAX_OUTBOUND_BUFFER_BYTES) is below their sum, with a peer that reads, is not closed 4429."""

from __future__ import annotations

from tests.conftest import QimDeployment
from tests.harness.batches import counter
from tests.harness.raw_socket import RawSocket
from tests.rooms.room_helpers import create_room, join, room_send

CAP = 32 * 1024  # the `capped` node's frame cap (tests/conftest.py): one replay fits a frame
# Six replays of 24 kB: 144 kB of replies to one read, past the 64 KiB held and the 40 kB bound.
CAPPED_ENV = {"QIM_MAX_OUTBOUND_BUFFER_BYTES": "40000", "QIM_ROOM_MSG_RATE": "1000"}
EVENTS, BIG, JOINS = 4, 6_000, 6


async def test_big_replies_to_one_read_come_in_order_and_the_socket_stays(capped: QimDeployment) -> None:
    acme = capped.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = create_room(alice)
    sender = await alice.connect()
    await join(sender, room)
    for n in range(EVENTS):
        await room_send(sender, room, f"{n}" + "x" * BIG)
    closed = counter(acme.node, acme, "slow_sockets_closed")
    raw = await RawSocket.open(capped.nodes[0].port)
    try:
        await raw.send_frames({"type": "AUTH", "req_id": "a", "token": bob.token(), "device_id": "phone"},
                              *({"type": "ROOM_JOIN", "req_id": f"j{n}", "room_id": room, "after_room_seq": 0}
                                for n in range(JOINS)),
                              {"type": "PING", "req_id": "p"})
        replies = await raw.read_texts(JOINS + 2)
    finally:
        raw.sock.close()
    assert [(r["type"], r.get("req_id")) for r in replies] == [
        ("AUTH_OK", "a"), *(("ROOM_BATCH", f"j{n}") for n in range(JOINS)), ("PONG", "p")]
    for batch in replies[1:-1]:
        assert [e["payload"]["text"][0] for e in batch["events"]] == [str(n) for n in range(EVENTS)], batch.get("has_more")
    assert counter(acme.node, acme, "slow_sockets_closed") == closed
