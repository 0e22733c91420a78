"""QIM's SEND load and the COPY baseline of bench/send_fanout.py in alternating slices.

QIM's case and COPY's used to run one after the other, each for the whole case, so on a
shared machine each half saw a different load and the ratio mostly said how busy the machine
was in each half (docs/performance.md, "What is measured"). Now one case is `rounds` rounds
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


# Unmetered, before the first round: each side's first batches on a new connection (sockets
# AUTHed, the node's first SENDs, a new PostgreSQL backend's catalog caches) are not the rate.
WARMUP_S = 0.3


class TreeCpu:
    """CPU-seconds of a process and all its descendants since this meter was made, counting
    the ones started meanwhile in full (PostgreSQL starts a backend per new connection and
    autovacuum workers as it goes; a list of pids taken at the start misses them). Processes
    that start and exit between two reads are still missed."""

    def __init__(self, root: int | None) -> None:
        self.root = root
        self.start = self._times()

    def _times(self) -> dict[int, float]:
        if self.root is None:
            return {}
        import psutil

        times: dict[int, float] = {}
        try:
            master = psutil.Process(self.root)
            procs = [master] + master.children(recursive=True)
        except psutil.Error:
            return times
        for proc in procs:
            try:
                cpu = proc.cpu_times()
                times[proc.pid] = cpu.user + cpu.system
            except psutil.Error:
                pass
        return times

    def seconds(self) -> float | None:
        if self.root is None:
            return None
        return sum(max(0.0, cpu - self.start.get(pid, 0.0)) for pid, cpu in self._times().items())


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

    def add(self, out: dict[str, Any], wall: float, cpu_pct: float, db_cpu_s: float | None) -> None:
        self.acks += out["acks"]
        self.elapsed += out["elapsed"]
        self.latencies += out["latencies"]
        self.wall += wall
        self.cpu_s += cpu_pct * wall / 100
        if db_cpu_s is not None:
            self.db_cpu_s = (self.db_cpu_s or 0.0) + db_cpu_s

    def out(self) -> dict[str, Any]:
        return {"acks": self.acks, "elapsed": self.elapsed, "latencies": self.latencies}

    def cpu_pct(self) -> tuple[float, float | None]:
        wall = self.wall or 1.0
        db = None if self.db_cpu_s is None else round(100 * self.db_cpu_s / wall, 1)
        return round(100 * self.cpu_s / wall, 1), db


    def db_cpu_ms_per_send(self) -> float | None:
        """PostgreSQL's CPU per acknowledged SEND over QIM's slices."""
        if self.db_cpu_s is None or not self.acks:
            return None
        return round(1000 * self.db_cpu_s / self.acks, 2)


def qim_slice(totals: SliceTotals, send: Callable[[float], dict[str, Any]], pids: list[int], db_root: int | None,
              seconds: float) -> None:
    """One slice of QIM's SEND load (`send(seconds)` runs the senders), metered; `db_root` is
    PostgreSQL's postmaster (its whole process tree is metered), None on SQLite."""
    meter, db_meter = CpuMeter(pids), TreeCpu(db_root)
    started = time.monotonic()
    out = send(seconds)
    wall = time.monotonic() - started
    totals.add(out, wall, meter.read(), db_meter.seconds())


def alternate(send: Callable[[float], dict[str, Any]], copy_url: str | None, size: int, seconds: float,
              rounds: int, pids: list[int], db_root: int | None) -> tuple[SliceTotals, dict[str, Any] | None]:
    """QIM's load for `seconds` in all and, with `copy_url`, the COPY baseline for as long,
    in `rounds` alternating slices (module doc), each side warmed up first (WARMUP_S, not
    counted); answers QIM's totals and COPY's figures (with PostgreSQL's CPU-seconds over
    COPY's slices)."""
    totals = SliceTotals()
    send(WARMUP_S)
    if copy_url is None:
        qim_slice(totals, send, pids, db_root, seconds)
        return totals, None
    copied: dict[str, Any] = {"messages": 0, "elapsed": 0.0, "db_cpu_s": None}
    piece = seconds / rounds
    with load_process() as copier:
        copier.apply(copy_prepare, (copy_url, size))
        warm = copier.apply(copy_slice, (copy_url, size, WARMUP_S, 0))["messages"]
        for index in range(rounds):
            for side in (("qim", "copy") if index % 2 == 0 else ("copy", "qim")):
                if side == "qim":
                    qim_slice(totals, send, pids, db_root, piece)
                    continue
                db_meter = TreeCpu(db_root)
                out = copier.apply(copy_slice, (copy_url, size, piece, warm + copied["messages"]))
                if (db_s := db_meter.seconds()) is not None:
                    copied["db_cpu_s"] = (copied["db_cpu_s"] or 0.0) + db_s
                copied["messages"] += out["messages"]
                copied["elapsed"] += out["elapsed"]
        copier.apply(copy_check, (copy_url, size, warm + copied["messages"]))
    return totals, copied
