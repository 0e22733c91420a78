"""The room benchmarks' receiver processes (bench/loadgen.py `Members` starts them): each
holds its share of a room's members on lean sockets and times every event it gets."""

from __future__ import annotations

import gc
import time
from array import array
from collections import Counter

from loadgen import Target, open_all, stamps_in, wait_event


def receiver_process(target: Target, tokens: list[str | None], ready, stop, recording, delivered, results) -> None:  # type: ignore[no-untyped-def]
    """Hold one room member per token; count every event received (`delivered`, shared), and
    while `recording` is 1 keep each latency (ms), count frames per connection and how many
    copies of each message id arrived (`seen`)."""
    import sys

    from common import raise_nofile

    raise_nofile()
    sys.setswitchinterval(0.05)
    latencies = array("f")
    frames: list[int] = [0] * len(tokens)
    # The most frames one connection got in one wall-clock second (calendar buckets).
    second, in_second, max_per_second = [0] * len(tokens), [0] * len(tokens), [0] * len(tokens)
    first_last = [0.0, 0.0]
    seen: Counter[bytes] = Counter()
    count_ids = seen.update  # Counter's C loop

    def handler(index: int):  # type: ignore[no-untyped-def]
        def on_text(payload: bytes) -> None:
            stamps = stamps_in(payload)
            if not stamps:
                return
            now = time.time_ns()
            delivered.value += len(stamps)
            if recording.value:
                frames[index] += 1
                sec = now // 1_000_000_000
                if sec != second[index]:
                    second[index], in_second[index] = sec, 0
                in_second[index] += 1
                if in_second[index] > max_per_second[index]:
                    max_per_second[index] = in_second[index]
                for stamp, ident in stamps:
                    latencies.append((now - int(stamp)) / 1e6)
                count_ids(ident for _, ident in stamps)
                if not first_last[0]:
                    first_last[0] = now / 1e9
                first_last[1] = now / 1e9

        return on_text

    async def main() -> None:
        started = time.monotonic()
        try:
            sockets = await open_all(target, tokens)
        except Exception as exc:  # reported, not raised: the parent is waiting on `ready`
            ready.put({"error": repr(exc)})
            return
        for i, ws in enumerate(sockets):
            ws.on_text = handler(i)
        # The sockets and their protocols live until the end: out of the collector's passes,
        # which with 1 700 sockets stopped a receiver for 10-25 ms (gen 1) and 120-150 ms
        # (gen 2) while events queued in its sockets (issue 22, gc.callbacks).
        gc.freeze()
        ready.put({"connected": len(sockets), "connect_s": time.monotonic() - started})
        await wait_event(stop)
        results.put({"latencies": latencies.tobytes(), "frames": frames, "first_last": first_last,
                     "max_frames_per_second": max(max_per_second, default=0), "seen": seen})
        for ws in sockets:
            ws.abort()

    from lean_ws import run_receivers

    run_receivers(main())
