"""The set-based conversation list (qim/queries/conversation_list.py: correlated subqueries,
GREATEST, COALESCE) on PostgreSQL, where production runs it: the in-process oracle tests of
test_conversation_list.py, run by a pytest of their own against this session's server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness.qim_process import REPO, process_env
from tests.harness.services import PostgresServer


def test_the_list_matches_the_per_conversation_reads_on_postgresql(postgres: PostgresServer, work_dir: Path) -> None:
    # pytest-django makes (and drops) test_qim_list itself, migrated from nothing.
    env = {**process_env({"QIM_DATABASE_URL": postgres.url("qim_list")}), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/core/test_conversation_list.py", "-q", "-p", "no:cacheprovider",
         f"--basetemp={work_dir / 'list-on-postgres'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout
