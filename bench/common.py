"""What every benchmark shares: servers started for real, a lean load process, the report.

Each script prints a readable table and, as its last line of stdout, one JSON object with the
raw figures and a `ratios` map. Loads go to 127.0.0.1 only and are bounded in count and time.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
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
from tests.harness.qim_process import daphne_listen, process_env, wait_until_healthy  # noqa: E402
from tests.harness.services import PostgresServer, free_port, wait_for_port  # noqa: E402

# Daphne started through this, so that its file-descriptor limit is raised to the hard limit
# first (thousands of sockets; `ulimit -n` may be 1024 and the shell cannot raise it for us).
DAPHNE_WRAPPER = (
    "import resource, sys; "
    "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)); "
    "import bench.memhook; bench.memhook.install(); "
    "sys.argv[0] = 'daphne'; "
    "from daphne.cli import CommandLineInterface; CommandLineInterface.entrypoint()"
)


# Everything a benchmark starts, stopped at exit whatever happened (SIGTERM included: run_all
# sends it to a script that overran its time limit).
_RUNNING: list[Any] = []


def _stop_everything() -> None:
    while _RUNNING:
        server = _RUNNING.pop()
        try:
            server.stop()
        except Exception:
            pass


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")


import atexit  # noqa: E402

atexit.register(_stop_everything)
if mp.current_process().name == "MainProcess":
    signal.signal(signal.SIGTERM, _on_sigterm)


def running(server: Any) -> Any:
    """Remember a started server so that it is stopped at exit; answers it."""
    _RUNNING.append(server)
    return server


# The same, serving through uvicorn instead: measured side by side when it is installed
# (`pip install uvicorn`); not a requirement, daphne stays the supported server.
UVICORN_WRAPPER = DAPHNE_WRAPPER.split("sys.argv[0]")[0] + "sys.argv[0] = 'uvicorn'; import uvicorn; uvicorn.main()"


def uvicorn_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("uvicorn") is not None


def server_argv(port: int, app: str, asgi_server: str = "daphne") -> list[str]:
    if asgi_server == "uvicorn":
        return [sys.executable, "-c", UVICORN_WRAPPER, "--host", "127.0.0.1", "--port", str(port), "--ws", "websockets",
                "--lifespan", "off", "--no-access-log", "--ws-max-size", "1048576", app]
    return [sys.executable, "-c", DAPHNE_WRAPPER, *daphne_listen("127.0.0.1", port),
            "--websocket-max-message-size", "1048576", app]


def raise_nofile() -> int:
    """Raise this process's open-file limit to the hard limit; answers the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


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
            self.pg = running(PostgresServer.start())
            self._template = make_pg_template(self.pg)
        return pg_database(self.pg, self._template, name)

    def close(self) -> None:
        if self.pg is not None:
            self.pg.stop()


@contextmanager
def work_directory():  # type: ignore[no-untyped-def]
    """A temporary directory for databases and server logs; kept (its path on stderr) when
    QIM_BENCH_KEEP is set, to read the servers' logs after a failure."""
    if os.environ.get("QIM_BENCH_KEEP"):
        path = Path(tempfile.mkdtemp(prefix="qim-bench-"))
        print(f"work directory kept: {path}", file=sys.stderr)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="qim-bench-") as path:
        yield Path(path)


class BenchNode(QimNode):
    """A QimNode whose daphne runs with the open-file limit raised (DAPHNE_WRAPPER)."""

    app: str = "qim.asgi:application"
    health_path: str = "/api/v1/health"
    asgi_server: str = "daphne"

    def start(self, extra_env: dict[str, str] | None = None, timeout: float = 60.0) -> "BenchNode":
        env = process_env({**self.env, "QIM_NODE_ID": self.node_id, **(extra_env or {})})
        self.starts += 1
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            server_argv(self.port, self.app, self.asgi_server), env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )
        if self not in _RUNNING:
            running(self)
        self._wait_healthy(timeout)
        return self

    def _wait_healthy(self, timeout: float) -> None:
        wait_until_healthy(self.process, self.port, f"{self.http_url}{self.health_path}", self.log_path, self.node_id, timeout)


class TutorialNode(BenchNode):
    """The Channels-tutorial room baseline (bench/baselines/), same daphne as QIM."""

    app = "bench.baselines.tutorial_asgi:application"
    health_path = "/"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/chat/bench/"

    def counters(self) -> dict[str, int]:
        import httpx

        return httpx.get(self.http_url + "/", timeout=10).json()


def start_node(db: QimDatabase, work_dir: Path, node_id: str, extra_env: dict[str, str] | None = None,
               run_env: dict[str, str] | None = None, asgi_server: str = "daphne") -> BenchNode:
    """`extra_env` stays with the node across restarts; `run_env` is for this start only."""
    env = {**db.env, "QIM_VAR_DIR": str(work_dir), "QIM_LOG_LEVEL": "ERROR", **(extra_env or {})}
    node = BenchNode(node_id=node_id, env=env, log_dir=work_dir)
    node.asgi_server = asgi_server
    return node.start(run_env)


def start_tutorial(work_dir: Path, node_id: str, extra_env: dict[str, str] | None = None) -> TutorialNode:
    env = {"DJANGO_SETTINGS_MODULE": "bench.baselines.tutorial_settings", **(extra_env or {})}
    return TutorialNode(node_id=node_id, env=env, log_dir=work_dir).start()


class RawWsServer:
    """bench/baselines/raw_ws.py in its own process."""

    def __init__(self, work_dir: Path) -> None:
        self.port = free_port()
        self.log_path = work_dir / "raw_ws.log"
        self.process: subprocess.Popen | None = None

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def start(self) -> "RawWsServer":
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "baselines" / "raw_ws.py"), "--port", str(self.port)],
            cwd=REPO, stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT,
        )
        running(self)
        wait_for_port("127.0.0.1", self.port, 30)
        return self

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)


class RedisServer:
    """A throwaway redis-server on a free loopback port, nothing persisted."""

    def __init__(self, work_dir: Path) -> None:
        self.port = free_port()
        self.work_dir = work_dir
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.work_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        running(self)
        wait_for_port("127.0.0.1", self.port, 30)
        return self

    def command_calls(self) -> dict[str, int]:
        """INFO commandstats: calls per command (commands run inside scripts included)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}

    def reset_stats(self, flush: bool = False) -> None:
        """CONFIG RESETSTAT (commandstats from zero); with `flush`, FLUSHALL first. Never
        flush under running QIM nodes: leases and node heartbeats live there."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            if flush:
                client.flushall()
            client.config_resetstat()
        finally:
            client.close()

    def stop(self) -> None:
        stop_process(self.process)


def node_stats(node: QimNode, admin: str, timeout: float = 30) -> dict[str, Any]:
    """GET /api/v1/node: the node's connections, counters and collector figures."""
    return httpx.get(f"{node.http_url}/api/v1/node", headers={"Authorization": f"Token {admin}"}, timeout=timeout).json()


def rss(pid: int) -> int:
    """A process's resident memory, in bytes."""
    return psutil.Process(pid).memory_info().rss


def bootstrap(node: QimNode, tenant: str = "bench") -> str:
    return last_json_line(manage(node.env, "qim_bootstrap", "--tenant", tenant, "--admin", "admin", "--password", "pw"))["token"]


def populate(node: QimNode, users: int, tokens_out: Path, group: str | None = None, members: int = 0, tenant: str = "bench",
             tier: str | None = None) -> dict:
    """qim_populate; `tier` fixes the group's default mailbox tier (else by size)."""
    args = ["qim_populate", "--tenant", tenant, "--users", str(users), "--tokens-out", str(tokens_out)]
    if group:
        args += ["--group", group, "--group-members", str(members)]
    if tier:
        args += ["--group-tier", tier]
    manage(node.env, *args)
    return json.loads(tokens_out.read_text())


class CpuMeter:
    """CPU% of processes over an interval (100 = one core)."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                proc.cpu_percent(None)
                self.procs.append(proc)
            except psutil.Error:
                pass

    def read(self) -> float:
        return round(sum(self.each()), 1)

    def each(self) -> list[float]:
        """CPU% of each process (0 for one that exited meanwhile)."""
        out = []
        for proc in self.procs:
            try:
                out.append(proc.cpu_percent(None))
            except psutil.Error:
                out.append(0.0)
        return out


def cpu_split() -> tuple[set[int], set[int]] | None:
    """(the server's CPUs, the load generators' CPUs): the last CPU for the server, the others
    for the load, so that the load's own CPU does not pass for the server's latency (on this
    2-core machine 500 receiving sockets in two processes otherwise take the server's core
    whenever a room tick wakes them). None with a single CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[-1]}, set(cpus[:-1])


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` onto `cpus` (threads started later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def prioritize(pid: int) -> bool:
    """Every thread of process `pid` in the real-time class (SCHED_FIFO, the lowest priority),
    so it runs as soon as it wakes, ahead of every normal process on its CPU; needs root or
    CAP_SYS_NICE. Only for a process that sleeps nearly all the time (a latency probe): a busy
    one would starve its CPU. Whether it took."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, ProcessLookupError, FileNotFoundError):
        return False
    return True


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
