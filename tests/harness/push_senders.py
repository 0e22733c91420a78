"""Real PushSenders for tests: they write each push to a JSON-lines outbox file.

Selected with QIM_PUSH_SENDER=tests.harness.push_senders.<Name>; configured by environment,
since worker processes load them by dotted path with no arguments:
  QIM_TEST_PUSH_OUTBOX      the file every send appends one line to (shared by processes)
  QIM_TEST_PUSH_FAIL_TIMES  FlakyFileSender: how many first attempts of each task fail (1)
  QIM_TEST_PUSH_DELAY_MS    every sender: sleep this long per send, so workers overlap (0)
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from qim.models import Device, PushTask
from qim.push.senders import PushSendError


def read_outbox(path: str | Path) -> list[dict[str, Any]]:
    text = Path(path).read_text() if Path(path).exists() else ""
    return [json.loads(line) for line in text.splitlines() if line]


class JsonlFileSender:
    """Appends {task_id, device_id, kind, payload, attempt, worker_pid} per send."""

    def __init__(self) -> None:
        self.path = os.environ["QIM_TEST_PUSH_OUTBOX"]
        self.delay_s = float(os.environ.get("QIM_TEST_PUSH_DELAY_MS", "0")) / 1000

    def send(self, task: PushTask, device: Device) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        line = {
            "task_id": task.id,
            "device_id": device.device_id,
            "kind": task.kind,
            "payload": task.payload,
            "attempt": task.attempts + 1,
            "worker_pid": os.getpid(),
        }
        # One write(2) on an O_APPEND descriptor: lines of concurrent workers never interleave.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)


class FlakyFileSender(JsonlFileSender):
    """Fails the first N attempts of every task, then writes like JsonlFileSender.

    Counts by `task.attempts` (stored in the row), so it behaves the same whichever worker
    process makes the next attempt.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fail_times = int(os.environ.get("QIM_TEST_PUSH_FAIL_TIMES", "1"))

    def send(self, task: PushTask, device: Device) -> None:
        if task.attempts < self.fail_times:
            raise PushSendError(f"flaky: attempt {task.attempts + 1} of task {task.id} refused")
        super().send(task, device)


class CrashingFileSender(JsonlFileSender):
    """Writes its first push like JsonlFileSender, then kills the process (exit 137) before
    the worker can mark the task sent: a worker dying between the provider and the UPDATE."""

    def send(self, task: PushTask, device: Device) -> None:
        super().send(task, device)
        os._exit(137)
