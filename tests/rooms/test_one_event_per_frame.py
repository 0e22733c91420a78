"""QIM_ROOM_BATCH_MAX_EVENTS=1: every room event is pushed in a ROOM_BATCH of its own, in
room_seq order, also when the per-connection frame budget defers some of them; and the node
still counts the frames its ticks write straight to the socket."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.rooms.room_helpers import create_room, join, room_send


@pytest.fixture(scope="module")
def one_per_frame(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """Two frames per connection per 1.25 s, so that a burst of sends is merged by the tick
    (without the setting) and deferred by the budget."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_ROOM_BATCH_MAX_EVENTS": "1", "QIM_ROOM_MSG_RATE": "1000", "QIM_PER_USER_MSG_RATE": "1000",
        "QIM_ROOM_OUTBOUND_FRAME_RATE": "2", "QIM_LOG_LEVEL": "ERROR",
    })
    yield deployment
    deployment.stop()


async def pushed_batches(client, room: str, want: int, timeout: float = 60.0) -> list[dict]:  # type: ignore[no-untyped-def]
    """ROOM_BATCH pushes of `room` until they carry `want` events (generous for a loaded machine)."""
    frames: list[dict] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while sum(len(f["events"]) for f in frames) < want:
        remaining = deadline - asyncio.get_running_loop().time()
        assert remaining > 0, f"only {frames} arrived"
        frame = await client.next_push(timeout=remaining, type="ROOM_BATCH")
        if frame["room_id"] == room:
            frames.append(frame)
    return frames


@pytest.mark.tuned
async def test_a_burst_goes_out_one_event_per_frame_in_order(one_per_frame: QimDeployment) -> None:
    tenant = one_per_frame.tenants["acme"]
    sender, reader = tenant.persona("sender"), tenant.persona("reader")
    room = create_room(sender)
    s, r = await sender.connect(), await reader.connect()
    await join(s, room)
    await join(r, room)
    before = one_per_frame.node.stats(tenant.admin_token)["counters"].get("frames_written_direct", 0)

    # Sent together: the writer hands them over in one or few batches, the tick finds several
    # pending, and the budget (2 frames per 1.25 s) defers all but the first two.
    acks = await asyncio.gather(*(room_send(s, room, f"m{n}") for n in range(6)))
    frames = await pushed_batches(r, room, len(acks))

    assert [len(f["events"]) for f in frames] == [1] * 6
    assert [f["events"][0]["room_seq"] for f in frames] == sorted(a["room_seq"] for a in acks)
    assert [f["events"][0]["payload"]["text"] for f in frames] == [f"m{n}" for n in range(6)]
    with pytest.raises((TimeoutError, asyncio.TimeoutError)):
        await r.next_push(timeout=1.0, type="ROOM_BATCH")
    after = one_per_frame.node.stats(tenant.admin_token)["counters"].get("frames_written_direct", 0)
    assert after > before
    await tenant.close_clients()
