"""The unread property test (tests/core/test_unread_property.py) on PostgreSQL, where the
running counts' correlated subqueries and partial indexes run in production."""

from __future__ import annotations

from pathlib import Path

from tests.harness.on_postgres import run_file_on_postgres
from tests.harness.services import PostgresServer


def test_unread_property_holds_on_postgresql(postgres: PostgresServer, work_dir: Path) -> None:
    out = run_file_on_postgres(postgres, work_dir, "tests/core/test_unread_property.py", "qim_unread", timeout=280)
    assert "1 passed" in out
