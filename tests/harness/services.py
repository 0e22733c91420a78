"""A private PostgreSQL cluster for the test session, started for real.

Redis comes from pytest-redis (`redis_proc`). PostgreSQL does not use pytest-postgresql:
`initdb` and `pg_ctl` refuse to run as root (CI runs as root), and that plugin runs them as
the current user in a root-only temp directory. This starts the cluster as the `postgres`
system user instead when we are root.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


# Ports handed out by this process, not handed out twice even before their server binds them.
_HANDED_OUT: set[int] = set()
# Where free_port looks: from here up to the kernel's ephemeral range.
LOWEST_PORT = 10_000


def ephemeral_low() -> int:
    """The first port the kernel may give an outgoing connection (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A port nothing is bound to, below the kernel's ephemeral range. A port the kernel picked
    for `bind(0)` comes from that range, and once released it can be handed to any outgoing
    connection (a benchmark's thousands of clients, another test's) before the server meant
    for it binds it: the server then fails to start. Below the range only listeners take
    ports; a random start keeps parallel processes apart."""
    low = ephemeral_low()
    if low <= LOWEST_PORT + 1_000:
        with socket.socket() as sock:  # a machine with (almost) no room below its range
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    for _ in range(1_000):
        port = random.randrange(LOWEST_PORT, low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port between {LOWEST_PORT} and {low}")


def wait_for_port(host: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def _pg_bin(name: str) -> str:
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install PostgreSQL (make test does)")
    return found


@dataclass
class PostgresServer:
    """One throwaway cluster on a free port, trust auth on loopback only."""

    datadir: Path
    port: int
    user: str = "postgres"
    process_owner: str | None = None
    durable: bool = False

    @classmethod
    def start(cls, durable: bool = False) -> "PostgresServer":
        """A fresh cluster; `durable` keeps PostgreSQL's crash safety (fsync, synchronous
        commits), which the shared test cluster turns off for speed."""
        owner = "postgres" if os.geteuid() == 0 else None
        base = Path(tempfile.mkdtemp(prefix="qim-pg-"))
        datadir = base / "data"
        if owner:
            shutil.chown(base, user=owner)
            base.chmod(0o700)
        server = cls(datadir=datadir, port=free_port(), process_owner=owner, durable=durable)
        server._run(
            [_pg_bin("initdb"), "-D", str(datadir), "-U", server.user, "-A", "trust", "-E", "UTF8", "--no-sync"]
        )
        server.resume()
        return server

    def resume(self) -> None:
        """Start the server on its data directory and port (again, after `halt`)."""
        base = self.datadir.parent
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {base} -c max_connections=300"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            [_pg_bin("pg_ctl"), "-D", str(self.datadir), "-o", options, "-l", str(base / "log"), "-w", "start"]
        )
        wait_for_port("127.0.0.1", self.port)

    def halt(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data directory for `resume`: `fast` as an operator
        would (sessions cut, open transactions rolled back), `immediate` as in a crash (no
        checkpoint; the next start replays the WAL)."""
        self._run([_pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop"])

    def _run(self, argv: list[str]) -> None:
        if self.process_owner:
            argv = ["runuser", "-u", self.process_owner, "--", *argv]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def url(self, dbname: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        out = subprocess.run(
            ["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", self.url(dbname), "-c", sql],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def stop(self) -> None:
        try:
            self._run([_pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop"])
        finally:
            shutil.rmtree(self.datadir.parent, ignore_errors=True)
