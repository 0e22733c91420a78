"""QIM started for real: daphne processes, management commands, and a database to count in."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.harness.services import PostgresServer, free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
FAST_HASHER = "django.contrib.auth.hashers.MD5PasswordHasher"

BASE_ENV = {
    "DJANGO_SETTINGS_MODULE": "qim.settings",
    "QIM_SECRET_KEY": "test-secret-key-not-for-production",
    "QIM_ALLOWED_HOSTS": "127.0.0.1,localhost",
    "QIM_ALLOWED_ORIGINS": "http://allowed.example",
    # Tests make hundreds of users; PBKDF2 at production strength would take minutes.
    "QIM_PASSWORD_HASHERS": FAST_HASHER,
    "QIM_LOG_LEVEL": "WARNING",
    # Short enough that the 4408 test waits little, long enough for a loaded CI machine.
    "QIM_AUTH_TIMEOUT_S": "3",
    # Every test logs its personas in from 127.0.0.1: the production login throttles
    # (10/minute per account, 60/minute per address) would refuse them; the throttle tests
    # set tight ones.
    "QIM_AUTH_TOKEN_RATE_PER_ACCOUNT": "10000/minute",
    "QIM_AUTH_TOKEN_RATE_PER_ADDRESS": "100000/minute",
    "PYTHONUNBUFFERED": "1",
}


# Passed on from the test run to every process it starts: the suite's second CI run sets
# QIM_SERVER_TUNING=off for all of them (.ci/run).
INHERITED = ("QIM_SERVER_TUNING",)


def process_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QIM_") or k in INHERITED}
    env.update(BASE_ENV)
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    """Run `python manage.py ARGS` with that environment; answers stdout."""
    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        env=process_env(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def last_json_line(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


@dataclass
class QimDatabase:
    """The database the nodes share; tests count rows in it directly, as an operator would."""

    url: str
    pg: PostgresServer | None = None
    dbname: str | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"QIM_DATABASE_URL": self.url}

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        if self.pg is None:
            path = self.url.removeprefix("sqlite:///")
            with sqlite3.connect(path, timeout=30) as conn:
                return conn.execute(sql, params).fetchall()
        import psycopg

        with psycopg.connect(self.pg.url(self.dbname or "postgres")) as conn:
            return conn.execute(sql.replace("?", "%s"), params).fetchall()

    def count(self, table: str, where: str = "", params: tuple = ()) -> int:
        sql = f"SELECT count(*) FROM {table}" + (f" WHERE {where}" if where else "")
        return self.query(sql, params)[0][0]


def collect_static(var_dir: Path) -> None:
    """collectstatic into <var_dir>/static, the STATIC_ROOT of every node given that
    QIM_VAR_DIR: whitenoise serves the admin's and the API docs' files from there."""
    manage({"QIM_VAR_DIR": str(var_dir)}, "collectstatic", "--noinput", "-v0")


def make_sqlite_template(directory: Path) -> Path:
    """Migrate one SQLite file once per session; each server starts from a copy of it."""
    path = directory / "template.sqlite3"
    manage({"QIM_DATABASE_URL": f"sqlite:///{path}", "QIM_VAR_DIR": str(directory)}, "migrate", "-v0")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def sqlite_database(template: Path, directory: Path, name: str) -> QimDatabase:
    path = directory / f"{name}.sqlite3"
    shutil.copyfile(template, path)
    return QimDatabase(url=f"sqlite:///{path}")


def make_pg_template(pg: PostgresServer) -> str:
    pg.psql("CREATE DATABASE qim_template")
    manage({"QIM_DATABASE_URL": pg.url("qim_template")}, "migrate", "-v0")
    return "qim_template"


def pg_database(pg: PostgresServer, template: str, name: str) -> QimDatabase:
    pg.psql(f"CREATE DATABASE {name} TEMPLATE {template}")
    return QimDatabase(url=pg.url(name), pg=pg, dbname=name)


def wait_until_healthy(
    process: subprocess.Popen | None, port: int, health_url: str, log_path: Path, name: str, timeout: float
) -> None:
    """Until `health_url` answers 200; fails at once (with the log's tail) if the process died."""
    deadline = time.monotonic() + timeout
    wait_for_port("127.0.0.1", port, timeout)
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{name} exited:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{name} not healthy after {timeout}s")


# Daphne's -b/-p listen with Twisted's default backlog of 50: a reconnect storm overflows it,
# and each dropped SYN costs its client a 1 s (then 3 s) retransmission. An endpoint string
# sets it (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths"); the kernel
# caps it at somaxconn.
LISTEN_BACKLOG = 2048


def daphne_listen(host: str, port: int) -> list[str]:
    """daphne's arguments to listen on host:port with LISTEN_BACKLOG."""
    interface = host.strip("[]").replace(":", "\\:")
    return ["-e", f"tcp:port={port}:interface={interface}:backlog={LISTEN_BACKLOG}"]


@dataclass
class QimNode:
    """One daphne process serving qim.asgi:application on a free port."""

    node_id: str
    env: dict[str, str]
    log_dir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    starts: int = 0
    # The address daphne listens on; "0.0.0.0" lets a test reach it from a non-loopback one.
    bind: str = "127.0.0.1"
    # More daphne options, e.g. ("--ping-interval", "1") for the keepalive tests.
    daphne_args: tuple[str, ...] = ()
    # What runs daphne's command line: `-m daphne`, or a module that changes the process first
    # (tests/harness/daphne_versions.py).
    launcher: tuple[str, ...] = ("-m", "daphne")

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/v1"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.node_id}.log"

    def start(self, extra_env: dict[str, str] | None = None, timeout: float = 30.0) -> "QimNode":
        env = process_env({**self.env, "QIM_NODE_ID": self.node_id, **(extra_env or {})})
        self.starts += 1
        log = open(self.log_path, "a")
        log.write(f"\n==== start {self.starts} ====\n")
        log.flush()
        self.process = subprocess.Popen(
            [
                sys.executable, *self.launcher,
                *daphne_listen(self.bind, self.port),
                "--websocket-max-message-size", "1048576",
                *self._access_log(env),
                *self.daphne_args,
                "qim.asgi:application",
            ],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._wait_healthy(timeout)
        return self

    def _access_log(self, env: dict[str, str]) -> list[str]:
        """daphne writes its access log as plain text to stdout: a JSON-logging node keeps it in
        a file beside its log, as docs/operations.md §4.4 advises, so the log is JSON only."""
        if env.get("QIM_LOG_FORMAT", "").lower() != "json":
            return []
        return ["--access-log", str(self.log_dir / f"{self.node_id}.access.log")]

    def _wait_healthy(self, timeout: float) -> None:
        wait_until_healthy(self.process, self.port, f"{self.http_url}/api/v1/health", self.log_path, self.node_id, timeout)

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean anything up, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def wait_exit(self, timeout: float = 10.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def stats(self, admin_token: str) -> dict[str, Any]:
        answer = httpx.get(
            f"{self.http_url}/api/v1/node", headers={"Authorization": f"Token {admin_token}"}
        )
        answer.raise_for_status()
        return answer.json()
