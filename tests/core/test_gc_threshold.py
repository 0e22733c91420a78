"""QIM_GC_YOUNG_THRESHOLD, QIM_GC_MIDDLE_THRESHOLD and QIM_GC_OLD_THRESHOLD set the node's
collector thresholds at start-up (qim/asgi.py); GET /api/v1/node says which are in force, and
counts the passes the collector made per generation."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import start_embedded


def test_the_thresholds_are_the_settings(sqlite_template: Path, work_dir: Path) -> None:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_GC_YOUNG_THRESHOLD": "12345", "QIM_GC_MIDDLE_THRESHOLD": "3", "QIM_GC_OLD_THRESHOLD": "77"})
    try:
        stats = deployment.node.stats(deployment.tenants["acme"].admin_token)
        assert stats["gc_thresholds"] == [12345, 3, 77]
        passes = stats["gc_collections"]  # young, middle, full
        assert len(passes) == 3 and all(isinstance(n, int) and n >= 0 for n in passes), passes
    finally:
        deployment.stop()
