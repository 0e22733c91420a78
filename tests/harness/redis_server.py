"""A redis-server of a test's own, on a fixed free port, that the test may kill -9 and start
again empty on the same port (the session-wide `redis_proc` is shared and must not die)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.services import free_port, wait_for_port


@dataclass
class RedisServer:
    """No persistence (no RDB, no AOF): every restart starts empty, like a lost instance."""

    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="qim-redis-")))
    starts: int = 0
    # More redis-server arguments (a replica's --replicaof).
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> "RedisServer":
        self.starts += 1
        executable = shutil.which("redis-server") or "/usr/bin/redis-server"
        log = open(self.workdir / "redis.log", "a")
        self.process = subprocess.Popen(
            [executable, "--port", str(self.port), "--bind", self.host, "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), "--databases", "64", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT,
        )
        wait_for_port(self.host, self.port, timeout=30)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown, no save; every client connection breaks."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)
