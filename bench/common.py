"""What every benchmark shares: servers started for real, a lean load process, the report.

Each script prints a readable table and, as its last line of stdout, one JSON object with the
raw figures and a `ratios` map. Loads go to 127.0.0.1 only and are bounded in count and time.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.harness.qim_process import (  # noqa: E402  (the harness tests use, reused)
    QimDatabase,
    QimNode,
    last_json_line,
    make_pg_template,
    make_sqlite_template,
    manage,
    pg_database,
    sqlite_database,
)
from tests.harness.services import PostgresServer  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


class Backend:
    """A database (SQLite file or a private PostgreSQL) with QIM migrated into it."""

    def __init__(self, kind: str, work_dir: Path) -> None:
        self.kind = kind
        self.work_dir = work_dir
        self.pg: PostgresServer | None = None
        self._template: Any = None

    def database(self, name: str) -> QimDatabase:
        if self.kind == "sqlite":
            if self._template is None:
                self._template = make_sqlite_template(self.work_dir)
            return sqlite_database(self._template, self.work_dir, name)
        if self.pg is None:
            self.pg = PostgresServer.start()
            self._template = make_pg_template(self.pg)
        return pg_database(self.pg, self._template, name)

    def close(self) -> None:
        if self.pg is not None:
            self.pg.stop()


@contextmanager
def work_directory():  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory(prefix="qim-bench-") as path:
        yield Path(path)


def start_node(db: QimDatabase, work_dir: Path, node_id: str, extra_env: dict[str, str] | None = None) -> QimNode:
    env = {**db.env, "QIM_VAR_DIR": str(work_dir), "QIM_LOG_LEVEL": "ERROR", **(extra_env or {})}
    return QimNode(node_id=node_id, env=env, log_dir=work_dir).start()


def bootstrap(node: QimNode, tenant: str = "bench") -> str:
    return last_json_line(manage(node.env, "qim_bootstrap", "--tenant", tenant, "--admin", "admin", "--password", "pw"))["token"]


def populate(node: QimNode, users: int, tokens_out: Path, group: str | None = None, members: int = 0, tenant: str = "bench") -> dict:
    args = ["qim_populate", "--tenant", tenant, "--users", str(users), "--tokens-out", str(tokens_out)]
    if group:
        args += ["--group", group, "--group-members", str(members)]
    manage(node.env, *args)
    return json.loads(tokens_out.read_text())


class CpuMeter:
    """CPU% of processes over an interval (100 = one core)."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(pid) for pid in pids]
        for proc in self.procs:
            proc.cpu_percent(None)

    def read(self) -> float:
        return round(sum(proc.cpu_percent(None) for proc in self.procs), 1)


def run_in_processes(target: Callable[..., Any], args_list: list[tuple]) -> list[Any]:
    """Run load generators in separate processes; each returns one picklable result."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(len(args_list)) as pool:
        return pool.starmap(target, args_list)


def print_table(title: str, headers: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths)))
    for row in rows:
        print("  ".join(str(v).rjust(w) for v, w in zip(row, widths)))


def emit(result: dict[str, Any]) -> None:
    """The last line of stdout: the whole result as one JSON object."""
    result.setdefault("machine", {"cpus": os.cpu_count(), "python": sys.version.split()[0]})
    result.setdefault("at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    sys.stdout.flush()
    print(json.dumps(result, sort_keys=True))
