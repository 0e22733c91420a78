"""Several `qim_push_worker` processes on one real database: each task is sent exactly once.

Runs on PostgreSQL (claims with SKIP LOCKED) and, for the embedded setup, on SQLite (claims
serialized by BEGIN IMMEDIATE). Pushes go through the file senders of tests/harness.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.harness.push_senders import read_outbox
from tests.harness.qim_process import (
    REPO,
    QimDatabase,
    last_json_line,
    manage,
    pg_database,
    process_env,
    sqlite_database,
)

_serial = itertools.count(1)
SENDERS = "tests.harness.push_senders"

# Made with the ORM through `manage.py shell`, so the seed follows the models as they change.
SEED = """
import json
from qim.actions.accounts import do_populate_users
from qim.clock import now_ms
from qim.models import Device, PushTask, Tenant
tenant = Tenant.objects.create(name="acme")
do_populate_users(tenant, {users}, "pw", "phone")
Device.objects.update(push_platform="fcm", push_token="fcm-token")
devices = list(Device.objects.select_related("user").order_by("id"))
now = now_ms()
tasks = PushTask.objects.bulk_create(
    PushTask(
        tenant=tenant, user=devices[i % len(devices)].user, device=devices[i % len(devices)],
        payload={{"n": i}}, available_at_ms=now, created_at_ms=now,
    )
    for i in range({tasks})
)
print(json.dumps({{"task_ids": [t.id for t in tasks]}}))
"""


@pytest.fixture(params=["postgresql", "sqlite"])
def push_db(request: pytest.FixtureRequest, work_dir: Path) -> QimDatabase:
    """A fresh migrated database of either backend (PostgreSQL and Redis fixtures start lazily)."""
    name = f"push{next(_serial)}"
    if request.param == "postgresql":
        postgres = request.getfixturevalue("postgres")
        return pg_database(postgres, request.getfixturevalue("pg_template"), f"qim_{name}")
    return sqlite_database(request.getfixturevalue("sqlite_template"), work_dir, name)


def worker_env(db: QimDatabase, work_dir: Path, outbox: Path, sender: str, **extra: str) -> dict[str, str]:
    return {
        **db.env,
        "QIM_VAR_DIR": str(work_dir),
        "QIM_PUSH_SENDER": f"{SENDERS}.{sender}",
        "QIM_TEST_PUSH_OUTBOX": str(outbox),
        **extra,
    }


def seed(env: dict[str, str], tasks: int, users: int = 30) -> list[int]:
    return last_json_line(manage(env, "shell", "-c", SEED.format(users=users, tasks=tasks)))["task_ids"]


def start_worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "qim_push_worker", *args],
        env=process_env(env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(worker: subprocess.Popen[str], timeout: float = 120, returncode: int = 0) -> dict[str, Any] | None:
    """Wait for a worker; answers its JSON report (None for a worker expected to crash)."""
    stdout, stderr = worker.communicate(timeout=timeout)
    assert worker.returncode == returncode, f"worker exited {worker.returncode}:\n{stdout}\n{stderr}"
    return last_json_line(stdout) if returncode == 0 else None


def states(db: QimDatabase) -> dict[str, int]:
    return dict(db.query("SELECT state, count(*) FROM qim_pushtask GROUP BY state"))


def test_three_workers_send_every_task_exactly_once(push_db: QimDatabase, work_dir: Path, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    # 10 ms per send keeps the three workers overlapping for the whole run.
    env = worker_env(push_db, work_dir, outbox, "JsonlFileSender", QIM_TEST_PUSH_DELAY_MS="10")
    task_ids = seed(env, tasks=300)
    workers = [start_worker(env, "--once", "--batch", "10") for _ in range(3)]
    reports = [finish(worker) for worker in workers]

    lines = read_outbox(outbox)
    sends = Counter(line["task_id"] for line in lines)
    assert set(sends) == set(task_ids), "some task was never sent"
    assert [t for t, n in sends.items() if n > 1] == [], "some task was sent twice"
    assert sum(r["sent"] for r in reports) == 300
    assert {(r["failed"], r["retried"]) for r in reports} == {(0, 0)}
    assert len({line["worker_pid"] for line in lines}) >= 2, "the workers did not run concurrently"
    assert states(push_db) == {"sent": 300}
    assert push_db.count("qim_pushtask", "claimed_by <> '' OR attempts <> 1") == 0


def test_flaky_sends_are_retried_until_every_task_is_sent(
    push_db: QimDatabase, work_dir: Path, tmp_path: Path
) -> None:
    """Each task fails once; a 10 ms backoff and --horizon let --once wait for the retries."""
    outbox = tmp_path / "outbox.jsonl"
    env = worker_env(
        push_db, work_dir, outbox, "FlakyFileSender",
        QIM_TEST_PUSH_FAIL_TIMES="1", QIM_PUSH_RETRY_BASE_S="0.01",
    )
    task_ids = seed(env, tasks=120)
    workers = [start_worker(env, "--once", "--batch", "10", "--horizon", "5") for _ in range(3)]
    reports = [finish(worker) for worker in workers]

    lines = read_outbox(outbox)
    assert sorted(line["task_id"] for line in lines) == sorted(task_ids)  # once each
    assert {line["attempt"] for line in lines} == {2}
    assert {key: sum(r[key] for r in reports) for key in ("sent", "failed", "retried")} == {
        "sent": 120, "failed": 0, "retried": 120,
    }
    assert states(push_db) == {"sent": 120}
    rows = push_db.query("SELECT attempts, last_error FROM qim_pushtask")
    assert {(attempts, error.split(":")[0]) for attempts, error in rows} == {(2, "PushSendError")}


def test_a_task_of_a_worker_that_died_mid_send_is_sent_again_after_the_lease(
    push_db: QimDatabase, work_dir: Path, tmp_path: Path
) -> None:
    """At least once: the dead worker's push went out but was never marked; after its lease
    the next worker sends it again, and the rest of its batch too."""
    outbox = tmp_path / "outbox.jsonl"
    env = worker_env(push_db, work_dir, outbox, "CrashingFileSender", QIM_PUSH_LEASE_S="1")
    task_ids = seed(env, tasks=20)
    finish(start_worker(env, "--once", "--batch", "5"), returncode=137)
    assert [line["task_id"] for line in read_outbox(outbox)] == [task_ids[0]]
    assert push_db.count("qim_pushtask", "claimed_by <> ''") == 5  # its whole batch, leased

    started = time.monotonic()
    env = {**env, "QIM_PUSH_SENDER": f"{SENDERS}.JsonlFileSender"}
    report = finish(start_worker(env, "--once", "--batch", "5", "--horizon", "3"))
    assert report == {"sent": 20, "failed": 0, "retried": 0}
    assert time.monotonic() - started < 30
    sends = Counter(line["task_id"] for line in read_outbox(outbox))
    assert sends == {task_id: 2 if task_id == task_ids[0] else 1 for task_id in task_ids}
    assert states(push_db) == {"sent": 20}


def test_sigterm_finishes_the_current_send_and_releases_the_rest(
    push_db: QimDatabase, work_dir: Path, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = worker_env(push_db, work_dir, outbox, "JsonlFileSender", QIM_TEST_PUSH_DELAY_MS="100")
    seed(env, tasks=100)
    worker = start_worker(env, "--batch", "100", "--idle-sleep", "0.1")
    deadline = time.monotonic() + 30
    while len(read_outbox(outbox)) < 3 and time.monotonic() < deadline:
        assert worker.poll() is None, worker.communicate()
        time.sleep(0.05)
    worker.send_signal(signal.SIGTERM)
    report = finish(worker, timeout=10)

    sent = len(read_outbox(outbox))
    assert 3 <= sent < 100 and report == {"sent": sent, "failed": 0, "retried": 0}
    assert states(push_db) == {"sent": sent, "pending": 100 - sent}
    # Nothing left half-done: every unsent task is free for the next worker at once.
    assert push_db.count("qim_pushtask", "state = 'pending' AND (claimed_by <> '' OR attempts <> 0)") == 0
