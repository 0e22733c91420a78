"""The set-based conversation list (qim/queries/conversation_list.py: correlated subqueries,
GREATEST, COALESCE) on PostgreSQL, where production runs it: the in-process oracle tests of
test_conversation_list.py, run by a pytest of their own against this session's server."""

from __future__ import annotations

from pathlib import Path

from tests.harness.on_postgres import run_file_on_postgres
from tests.harness.services import PostgresServer


def test_the_list_matches_the_per_conversation_reads_on_postgresql(postgres: PostgresServer, work_dir: Path) -> None:
    run_file_on_postgres(postgres, work_dir, "tests/core/test_conversation_list.py", "qim_list", timeout=240)
