"""C-3 on one node: a 200 msg/s flood into one room is cut to room_msg_rate; every member gets
every accepted message exactly once, in order, in at most room_outbound_frame_rate frames/s."""

from __future__ import annotations

import asyncio
import time

from qimclient import QimError
from tests.harness.personas import TenantHandle
from tests.harness.traffic import wait_until
from tests.rooms.room_helpers import create_room, join, room_send


async def test_c3_flood_is_rate_limited_and_merged(acme: TenantHandle) -> None:
    sender, watchers = acme.persona("flooder"), [acme.persona(f"watcher{i}") for i in range(3)]
    room = create_room(sender)
    s = await sender.connect()
    await join(s, room)
    clients = [await w.connect() for w in watchers]
    frames: dict[int, list[tuple[float, list[int]]]] = {i: [] for i in range(len(clients))}
    for i, client in enumerate(clients):
        await join(client, room)
        client.on_push("ROOM_BATCH", lambda f, i=i: frames[i].append((time.monotonic(), [e["room_seq"] for e in f["events"]])))

    accepted, limited = [], []
    started = time.monotonic()
    for n in range(1000):  # 200 msg/s for 5 s
        due = started + n / 200
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        try:
            accepted.append((await room_send(s, room, f"f{n}"))["room_seq"])
        except QimError as refused:
            assert refused.code == "rate_limited" and refused.retry_after_ms >= 0
            limited.append(refused)
    elapsed = time.monotonic() - started

    def last_seen(i: int) -> int:
        return frames[i][-1][1][-1] if frames[i] and frames[i][-1][1] else 0

    # The last merged frames out, however late a loaded machine delivers them (polled).
    await wait_until(lambda: all(last_seen(i) >= accepted[-1] for i in frames), 60, "every watcher got the last message")

    rate = s.auth_ok["limits"]["room_msg_rate"]
    frame_rate = s.auth_ok["limits"]["room_outbound_frame_rate"]
    assert len(accepted) <= rate * elapsed + rate  # rate x duration + burst
    assert len(accepted) >= rate * 4  # and the room did keep accepting at its rate
    assert len(accepted) + len(limited) == 1000
    for i, got in frames.items():
        seqs = [seq for _, batch in got for seq in batch]
        assert seqs == accepted, f"watcher {i} missed, doubled or reordered messages"
        times = [t for t, _ in got]
        worst = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
        assert worst <= frame_rate, f"watcher {i} got {worst} ROOM_BATCH frames in one second"
        assert len(got) < len(accepted)  # merging happened
