"""An env-gated memory probe inside a served process (bench only): with
QIM_BENCH_TRACEMALLOC=<frames> the first SIGUSR2 starts tracing allocations (from then on:
tracing from the start makes Django's start-up too slow for the health check), and each SIGUSR2
writes a tracemalloc snapshot and a count of live objects by type to
QIM_BENCH_TRACEMALLOC_OUT-<n>.{snap,types.json}, so that a benchmark can diff two moments
(bench/memprobe.py). py-spy cannot say where memory goes; this can."""

from __future__ import annotations

import gc
import json
import os
import signal
import tracemalloc
from collections import Counter

_taken = [0]


def _dump(signum, frame) -> None:  # type: ignore[no-untyped-def]
    _taken[0] += 1
    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ["QIM_BENCH_TRACEMALLOC"]))
    base = f"{os.environ['QIM_BENCH_TRACEMALLOC_OUT']}-{_taken[0]}"
    tracemalloc.take_snapshot().dump(base + ".snap")
    types = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())
    with open(base + ".types.json", "w") as out:
        json.dump(dict(types.most_common(200)), out)
    with open(base + ".done", "w") as out:
        out.write(str(tracemalloc.get_traced_memory()[0]))


def install() -> None:
    frames = int(os.environ.get("QIM_BENCH_TRACEMALLOC", "0") or 0)
    if frames <= 0:
        return
    signal.signal(signal.SIGUSR2, _dump)
