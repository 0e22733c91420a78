"""Running an in-process (pytest-django) test file again on PostgreSQL: a pytest of its own
against this session's server, which makes (and drops) the test database itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness.qim_process import REPO, process_env
from tests.harness.services import PostgresServer


def run_file_on_postgres(postgres: PostgresServer, work_dir: Path, test_file: str, dbname: str, timeout: float) -> str:
    """Run `test_file` with QIM_DATABASE_URL on `postgres`; answers its stdout once it passed
    with nothing skipped (asserting otherwise)."""
    env = {**process_env({"QIM_DATABASE_URL": postgres.url(dbname)}), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider",
         f"--basetemp={work_dir / (dbname + '-on-postgres')}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout
    return run.stdout
