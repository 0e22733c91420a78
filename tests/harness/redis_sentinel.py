"""Redis under Sentinel, started for real from Debian's redis-server: a master, a replica and
three sentinels (redis-server --sentinel) watching them, with a short down-after so that a
killed master is replaced within seconds."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.harness.redis_server import RedisServer
from tests.harness.services import free_port, wait_for_port

MASTER_NAME = "qim"
DOWN_AFTER_MS = 1000


@dataclass
class SentinelGroup:
    master: RedisServer
    replica: RedisServer
    ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(3)])
    processes: list[subprocess.Popen] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="qim-sentinel-")))

    @classmethod
    def start(cls) -> "SentinelGroup":
        master = RedisServer().start()
        replica = RedisServer(extra_args=["--replicaof", master.host, str(master.port)]).start()
        group = cls(master, replica)
        for port in group.ports:
            group._start_sentinel(port)
        group.wait_until(lambda: group.replicas_known() >= 1 and group.sentinels_known() >= 2,
                         "the sentinels to know the replica and each other")
        return group

    def _start_sentinel(self, port: int) -> None:
        conf = self.workdir / f"sentinel-{port}.conf"  # sentinels rewrite their file: one each
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
            f"sentinel monitor {MASTER_NAME} {self.master.host} {self.master.port} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        log = open(self.workdir / f"sentinel-{port}.log", "a")
        executable = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.processes.append(subprocess.Popen([executable, str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT))
        wait_for_port("127.0.0.1", port, timeout=30)

    @property
    def addresses(self) -> str:
        """QIM_REDIS_SENTINELS."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def _ask(self, *command: str):  # type: ignore[no-untyped-def]
        with redis.Redis(port=self.ports[0], decode_responses=True, socket_timeout=5) as sentinel:
            return sentinel.execute_command(*command)

    def master_port(self) -> int:
        host, port = self._ask("SENTINEL", "get-master-addr-by-name", MASTER_NAME)
        return int(port)

    def replicas_known(self) -> int:
        return len(self._ask("SENTINEL", "replicas", MASTER_NAME))

    def sentinels_known(self) -> int:
        return len(self._ask("SENTINEL", "sentinels", MASTER_NAME))

    def wait_until(self, condition, what: str, timeout: float = 60.0) -> float:  # type: ignore[no-untyped-def]
        started = time.monotonic()
        while not condition():
            assert time.monotonic() - started < timeout, f"{what} not within {timeout} s"
            time.sleep(0.1)
        return time.monotonic() - started

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=10)
        self.master.stop()
        self.replica.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
