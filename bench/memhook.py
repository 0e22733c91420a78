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
import sys
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
    with open(base + ".holders.txt", "w") as out:
        out.write(_holders())
    with open(base + ".done", "w") as out:
        out.write(str(tracemalloc.get_traced_memory()[0]))


def _holders() -> str:
    """One socket's protocol: its instance attributes, and who still holds the upgraded HTTP
    request and channel (the referrers' types), to find what a socket keeps alive."""
    lines: list[str] = []
    everything = gc.get_objects()
    for obj in everything:
        name = type(obj).__qualname__
        if name == "WebSocketProtocol" and not any(line.startswith("protocol") for line in lines):
            keys = sorted(vars(obj))
            lines.append(f"protocol dict: {len(keys)} keys, {sys.getsizeof(vars(obj))} bytes: {' '.join(keys)}")
        elif name in ("HTTPChannel", "RawBodyWebRequest") and len(lines) < 8:
            kinds = [_describe(r, obj, everything) for r in gc.get_referrers(obj) if r is not everything]
            lines.append(f"{name} held by {kinds}")
    return "\n".join(lines) + "\n"


def _describe(referrer, obj, everything) -> str:  # type: ignore[no-untyped-def]
    if isinstance(referrer, (tuple, list)):
        outer = [f"{type(o).__qualname__}{_func(o, everything)}" for o in gc.get_referrers(referrer) if o is not everything]
        return f"{type(referrer).__qualname__}(len {len(referrer)}) in {outer[:4]}"
    return f"{type(referrer).__qualname__}:{_where(referrer, obj)}"


def _func(obj, everything) -> str:  # type: ignore[no-untyped-def]
    if not hasattr(obj, "func"):
        return ""
    held = [type(o).__qualname__ for o in gc.get_referrers(obj) if o is not everything]
    return f"({getattr(obj.func, '__qualname__', obj.func)} held by {held[:3]})"


def _where(referrer, obj) -> str:  # type: ignore[no-untyped-def]
    if isinstance(referrer, dict):
        return ",".join(str(k) for k, v in referrer.items() if v is obj)
    return ""


def install() -> None:
    frames = int(os.environ.get("QIM_BENCH_TRACEMALLOC", "0") or 0)
    if frames <= 0:
        return
    signal.signal(signal.SIGUSR2, _dump)
