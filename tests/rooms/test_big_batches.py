"""Room frames stay under QIM_MAX_OUTBOUND_FRAME_BYTES (rooms/batches.py): big room messages
arrive exactly once and in order on live fan-out, on the deferred path and on replay, in
frames that each fit the cap, and the per-connection frame rate holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.harness.capped import CappedReader
from tests.harness.personas import Persona, TenantHandle
from tests.rooms.room_helpers import create_room, join, room_send

CAP = 128 * 1024  # four 30 kB events a frame: 40 of them need ten frames
FRAME_RATE = 4
BIG = 30_000
SENT = 40
# The `capped` node (tests/conftest.py) of this module: rooms take what the tests send at once.
CAPPED_ENV = {"QIM_ROOM_MSG_RATE": "1000", "QIM_ROOM_OUTBOUND_FRAME_RATE": str(FRAME_RATE)}


class RoomReader(CappedReader):
    """A capped reader of room pushes (tests/harness/capped.py)."""

    @classmethod
    async def open(cls, persona: Persona, cap: int = CAP, device_id: str = "phone") -> "RoomReader":
        return await super().open(persona, cap, device_id)

    async def room_events(self, want: dict[str, int], timeout: float = 30.0) -> dict[str, list[dict]]:
        """Pushed events per room until each room has its `want`."""
        got: dict[str, list[dict]] = {room: [] for room in want}
        deadline = time.monotonic() + timeout
        while any(len(got[room]) < n for room, n in want.items()):
            frame = await self.recv(timeout=max(0.01, deadline - time.monotonic()))
            assert frame["type"] == "ROOM_BATCH" and "req_id" not in frame, frame.get("type")
            got[frame["room_id"]] += frame["events"]
        return got

    def pushes(self) -> list[tuple[float, int, dict]]:
        return [(t, size, f) for t, size, f in self.frames if f["type"] == "ROOM_BATCH" and "req_id" not in f]

    def assert_under_cap_and_rate(self) -> None:
        self.assert_under_cap()
        times = [t for t, _, _ in self.pushes()]
        worst = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
        assert worst <= FRAME_RATE, f"{worst} ROOM_BATCH frames in one second"


def text_of(n: int) -> str:
    return f"{n:03d}" + chr(0x41 + n % 26) * BIG


async def send_big(client: Any, room: str, count: int, first: int = 0) -> list[dict]:
    return [await room_send(client, room, text_of(first + n)) for n in range(count)]


async def test_live_fan_out_is_cut_into_frames_under_the_cap(capped_acme: TenantHandle) -> None:
    sender = capped_acme.persona("sender")
    room = create_room(sender)
    s = await sender.connect()
    await join(s, room)
    readers = [await RoomReader.open(capped_acme.persona(f"reader{i}")) for i in range(2)]
    for i, reader in enumerate(readers):
        assert (await reader.request({"type": "ROOM_JOIN", "req_id": f"j{i}", "room_id": room}))["events"] == []

    acks = await send_big(s, room, SENT)  # 1.2 MB, faster than four frames a second carry
    for reader in readers:
        events = (await reader.room_events({room: SENT}))[room]
        assert [e["room_seq"] for e in events] == [a["room_seq"] for a in acks]
        assert [e["payload"]["text"] for e in events] == [text_of(n) for n in range(SENT)]
        await reader.assert_nothing_more()
        reader.assert_under_cap_and_rate()
        assert max(len(f["events"]) for _, _, f in reader.pushes()) > 1  # merged, then cut
        await reader.close()


async def test_deferred_frames_of_several_rooms_are_cut_and_keep_their_order(capped_acme: TenantHandle) -> None:
    sender = capped_acme.persona("sender")
    rooms = [create_room(sender) for _ in range(3)]
    s = await sender.connect()
    reader = await RoomReader.open(capped_acme.persona("reader"))
    for i, room in enumerate(rooms):
        await join(s, room)
        await reader.request({"type": "ROOM_JOIN", "req_id": f"j{i}", "room_id": room})

    acks: dict[str, list[dict]] = {room: [] for room in rooms}
    for n in range(15):  # each room flushes on its own tick; together they exceed the budget
        for room in rooms:
            acks[room].append(await room_send(s, room, text_of(n)))
    got = await reader.room_events({room: 15 for room in rooms})
    for room in rooms:
        assert [e["room_seq"] for e in got[room]] == [a["room_seq"] for a in acks[room]]
        assert [e["payload"]["text"] for e in got[room]] == [text_of(n) for n in range(15)]
    await reader.assert_nothing_more()
    reader.assert_under_cap_and_rate()
    await reader.close()


async def test_a_replay_too_large_for_one_frame_pages_with_has_more(capped_acme: TenantHandle) -> None:
    sender = capped_acme.persona("sender")
    room = create_room(sender)
    s = await sender.connect()
    await join(s, room)
    acks = await send_big(s, room, SENT)
    reader = await RoomReader.open(capped_acme.persona("latecomer"))

    # A join from the beginning: the oldest events that fit, and has_more.
    joined = await reader.request({"type": "ROOM_JOIN", "req_id": "j", "room_id": room, "after_room_seq": 0})
    assert joined["has_more"] is True and joined["replay_truncated"] is False
    assert 1 < len(joined["events"]) < SENT and joined["latest_room_seq"] == acks[-1]["room_seq"]
    replies = [joined]
    while replies[-1]["has_more"]:
        # A long req_id is echoed too: the reply still fits.
        req_id = f"more{len(replies)}-" + "r" * 2000
        replies.append(await reader.request({"type": "ROOM_REPLAY", "req_id": req_id, "room_id": room,
                                             "after_room_seq": replies[-1]["events"][-1]["room_seq"]}))
    events = [e for reply in replies for e in reply["events"]]
    assert [e["room_seq"] for e in events] == [a["room_seq"] for a in acks]
    assert [e["payload"]["text"] for e in events] == [text_of(n) for n in range(SENT)]
    assert len(replies) >= SENT * BIG // CAP and all(not r["replay_truncated"] for r in replies)
    assert all(size <= CAP for _, size, _ in reader.frames)
    await reader.assert_nothing_more()

    # Live pushes after the join start past its latest_room_seq: nothing twice.
    later = await room_send(s, room, "after the replay")
    live = (await reader.room_events({room: 1}))[room]
    assert [e["room_seq"] for e in live] == [later["room_seq"]]
    small = await reader.request({"type": "ROOM_REPLAY", "req_id": "small", "room_id": room,
                                  "after_room_seq": acks[-1]["room_seq"]})
    assert (small["has_more"], [e["room_seq"] for e in small["events"]]) == (False, [later["room_seq"]])
    await reader.close()


async def test_the_sdk_fetches_the_rest_of_a_cut_join_reply_by_itself(capped_acme: TenantHandle) -> None:
    sender, watcher = capped_acme.persona("sender"), capped_acme.persona("watcher")
    room = create_room(sender)
    s = await sender.connect()
    await join(s, room)
    acks = await send_big(s, room, SENT)
    w = await watcher.connect(sync=False)
    reply = await w.join_room(room, after_room_seq=0)
    assert reply["has_more"] is True
    later = await room_send(s, room, "live")  # arrives while the rest is being fetched
    async with asyncio.timeout(30):
        items = [await w.next_room_event(timeout=None, room_id=room) for _ in range(SENT + 1)]
    assert [i["kind"] for i in items] == ["event"] * (SENT + 1)
    assert [i["room_seq"] for i in items] == [a["room_seq"] for a in acks] + [later["room_seq"]]
    with pytest.raises(TimeoutError):
        await w.next_room_event(timeout=0.5)


@pytest.fixture(scope="module")
def cap_over_daphne(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_MAX_OUTBOUND_FRAME_BYTES": str(8 << 20), "QIM_ROOM_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


async def test_a_cap_set_above_daphnes_limit_is_held_to_it(cap_over_daphne: QimDeployment) -> None:
    tenant = cap_over_daphne.tenants["acme"]
    sender = tenant.persona("sender")
    room = create_room(sender)
    s = await sender.connect()
    await join(s, room)
    acks = await send_big(s, room, SENT)  # 1.2 MB: more than daphne's 1 MiB (the test nodes')
    daphne_limit = 1 << 20
    reader = await RoomReader.open(tenant.persona("reader"), cap=daphne_limit)
    joined = await reader.request({"type": "ROOM_JOIN", "req_id": "j", "room_id": room, "after_room_seq": 0})
    assert joined["has_more"] is True and len(joined["events"]) > SENT // 2
    rest = await reader.request({"type": "ROOM_REPLAY", "req_id": "r", "room_id": room,
                                 "after_room_seq": joined["events"][-1]["room_seq"]})
    assert rest["has_more"] is False
    assert [e["room_seq"] for e in joined["events"] + rest["events"]] == [a["room_seq"] for a in acks]
    await reader.assert_nothing_more()
    await reader.close()
    await tenant.close_clients()
