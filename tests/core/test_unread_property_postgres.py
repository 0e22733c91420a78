"""The unread property test (tests/core/test_unread_property.py) on PostgreSQL, where the
running counts' correlated subqueries and partial indexes run in production: the same file,
run by a pytest of its own against this session's server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness.qim_process import REPO, process_env
from tests.harness.services import PostgresServer


def test_unread_property_holds_on_postgresql(postgres: PostgresServer, work_dir: Path) -> None:
    # pytest-django makes (and drops) test_qim_unread itself, migrated from nothing.
    env = {**process_env({"QIM_DATABASE_URL": postgres.url("qim_unread")}), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/core/test_unread_property.py", "-q", "-p", "no:cacheprovider",
         f"--basetemp={work_dir / 'unread-on-postgres'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=280,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout and "skipped" not in run.stdout
