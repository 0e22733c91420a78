"""The backing services of a local cluster, started for real from Debian's packages: a private
PostgreSQL cluster and a Redis server, each in a directory of the cluster's own.

Only `deploy/cluster.py all` uses these; a real deployment points QIM_DATABASE_URL and
QIM_REDIS_URL at services it runs itself.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def wait_for_port(port: int, timeout: float = 60.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:g} s")


def _pg_bin(name: str) -> str:
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: install PostgreSQL (apt-get install postgresql)")
    return found


class Postgres:
    """A cluster under `directory`, trust auth on loopback only; as root, run by the
    `postgres` system user (initdb and the server refuse root)."""

    def __init__(self, directory: Path, port: int) -> None:
        self.port = port
        self.owner = "postgres" if os.geteuid() == 0 else None
        self.directory = directory if self._reachable(directory.parent) else Path(f"/var/tmp/qim-cluster-postgres-{port}")

    def _reachable(self, directory: Path) -> bool:
        """Whether the server's user can get to `directory` (a repo under /root cannot be)."""
        if not self.owner:
            return True
        directory.mkdir(parents=True, exist_ok=True)
        return subprocess.run(["runuser", "-u", self.owner, "--", "test", "-x", str(directory)]).returncode == 0

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/qim"

    def _run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
        program = Path(argv[0]).name
        if self.owner:
            argv = ["runuser", "-u", self.owner, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
        if done.returncode != 0:
            raise SystemExit(f"{program} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-1500:]}")
        return done

    def start(self) -> None:
        """initdb on first use (as `postgres` when root: every directory above --dir must let
        that user through), then the server, then the `qim` database."""
        data = self.directory / "data"
        if not (data / "PG_VERSION").exists():
            data.mkdir(parents=True, exist_ok=True)
            if self.owner:
                shutil.chown(self.directory, self.owner)
                shutil.chown(data, self.owner)
            self._run([_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"])
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._run([_pg_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(self.directory / "postgres.log"),
                   "-w", "start"])
        exists = self._run([_pg_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-tAc",
                            "SELECT 1 FROM pg_database WHERE datname = 'qim'"]).stdout.strip()
        if exists != "1":
            self._run([_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "qim"])

    def stop(self) -> None:
        try:
            self._run([_pg_bin("pg_ctl"), "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop"])
        except SystemExit as error:
            print(f"stopping PostgreSQL failed: {error}", flush=True)


class Redis:
    """redis-server on loopback, its dump in `directory` (kept across restarts of the cluster)."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(server).exists():
            raise SystemExit("redis-server not found: install Redis (apt-get install redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / "redis.log", "a")
        self.process = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--save", "60 1", "--appendonly", "no"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
