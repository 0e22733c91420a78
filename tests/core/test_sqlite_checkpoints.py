"""A server on the embedded default checkpoints SQLite's WAL from a thread of its own
(qim/infra/sqlite_checkpoints.py), not inside the commit that fills it."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import start_embedded
from tests.harness.personas import api_ok


def in_database_file(db_url: str, copy_to: Path, username: str) -> bool:
    """Whether `username` is in the database file itself: a copy of the file without its WAL
    shows only what a checkpoint has copied there."""
    shutil.copyfile(db_url.removeprefix("sqlite:///"), copy_to)
    with sqlite3.connect(copy_to) as conn:
        return conn.execute("SELECT count(*) FROM qim_user WHERE username = ?", (username,)).fetchone()[0] == 1


@pytest.mark.parametrize(("interval", "checkpointed"), [("0.2", True), ("0", False)])
def test_what_a_server_commits_reaches_the_database_file_within_the_interval(
    sqlite_template: Path, work_dir: Path, interval: str, checkpointed: bool
) -> None:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_SQLITE_CHECKPOINT_INTERVAL_S": interval})
    try:
        acme = deployment.tenants["acme"]
        api_ok(acme.node, "POST", "users", acme.admin_token, json={"username": "walter", "password": "pw-walter"})
        # Readers see the commit at once, wherever its pages are.
        assert deployment.db.count("qim_user", "username = ?", ("walter",)) == 1
        time.sleep(1.0)
        # With the checkpointer the pages are copied into the file; with SQLite's automatic
        # checkpoints (interval 0) a few pages stay in the WAL until it holds 1 000.
        assert in_database_file(deployment.db.url, work_dir / f"copy-{interval}.sqlite3", "walter") is checkpointed
    finally:
        deployment.stop()
