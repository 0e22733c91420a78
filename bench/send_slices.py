"""QIM's SEND load and the COPY baseline of bench/send_fanout.py in alternating slices.

QIM's case and COPY's used to run one after the other, each for the whole case, so on a
shared machine each half saw a different load and the ratio mostly said how busy the machine
was in each half (docs/performance.md, "SEND against COPY"). Now one case is `rounds` rounds
of a QIM slice and a COPY slice of seconds / rounds each, in ABBA order (QIM first in even
rounds, COPY first in odd ones), both against the same PostgreSQL with the same settings;
each side's figure is its messages over its own slices' time. Each side's load runs in one
process kept for the whole case (a process started per slice cost 1-2 s each under load).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from send_baselines import copy_check, copy_prepare, copy_slice
from common import CpuMeter


@contextmanager
def load_process() -> Iterator[Any]:
    """One spawned worker process for a side's slices (a multiprocessing pool of one)."""
    with mp.get_context("spawn").Pool(1) as pool:
        yield pool


class SliceTotals:
    """QIM's figures summed over its slices: ACKs, time, latencies, and CPU-seconds of the
    node and of PostgreSQL (so CPU% is over QIM's slices only, not COPY's)."""

    def __init__(self) -> None:
        self.acks = 0
        self.elapsed = 0.0
        self.wall = 0.0
        self.latencies: list[float] = []
        self.cpu_s = 0.0
        self.db_cpu_s: float | None = None

    def add(self, out: dict[str, Any], wall: float, cpu_pct: float, db_cpu_pct: float | None) -> None:
        self.acks += out["acks"]
        self.elapsed += out["elapsed"]
        self.latencies += out["latencies"]
        self.wall += wall
        self.cpu_s += cpu_pct * wall / 100
        if db_cpu_pct is not None:
            self.db_cpu_s = (self.db_cpu_s or 0.0) + db_cpu_pct * wall / 100

    def out(self) -> dict[str, Any]:
        return {"acks": self.acks, "elapsed": self.elapsed, "latencies": self.latencies}

    def cpu_pct(self) -> tuple[float, float | None]:
        wall = self.wall or 1.0
        db = None if self.db_cpu_s is None else round(100 * self.db_cpu_s / wall, 1)
        return round(100 * self.cpu_s / wall, 1), db


def qim_slice(totals: SliceTotals, send: Callable[[float], dict[str, Any]], pids: list[int], db_pids: list[int],
              seconds: float) -> None:
    """One slice of QIM's SEND load (`send(seconds)` runs the senders), metered."""
    meter, db_meter = CpuMeter(pids), CpuMeter(db_pids)
    started = time.monotonic()
    out = send(seconds)
    wall = time.monotonic() - started
    totals.add(out, wall, meter.read(), db_meter.read() if db_meter.procs else None)


def alternate(send: Callable[[float], dict[str, Any]], copy_url: str | None, size: int, seconds: float,
              rounds: int, pids: list[int], db_pids: list[int]) -> tuple[SliceTotals, dict[str, Any] | None]:
    """QIM's load for `seconds` in all and, with `copy_url`, the COPY baseline for as long,
    in `rounds` alternating slices (module doc); answers QIM's totals and COPY's figures."""
    totals = SliceTotals()
    if copy_url is None:
        qim_slice(totals, send, pids, db_pids, seconds)
        return totals, None
    copied = {"messages": 0, "elapsed": 0.0}
    piece = seconds / rounds
    with load_process() as copier:
        copier.apply(copy_prepare, (copy_url, size))
        for index in range(rounds):
            for side in (("qim", "copy") if index % 2 == 0 else ("copy", "qim")):
                if side == "qim":
                    qim_slice(totals, send, pids, db_pids, piece)
                    continue
                out = copier.apply(copy_slice, (copy_url, size, piece, copied["messages"]))
                copied["messages"] += out["messages"]
                copied["elapsed"] += out["elapsed"]
        copier.apply(copy_check, (copy_url, size, copied["messages"]))
    return totals, copied
