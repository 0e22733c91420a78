"""QIM_GC_YOUNG_THRESHOLD sets the node's young-generation collector threshold at start-up
(qim/asgi.py); GET /api/v1/node says which thresholds are in force."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import start_embedded


def test_the_young_threshold_is_the_settings(sqlite_template: Path, work_dir: Path) -> None:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_GC_YOUNG_THRESHOLD": "12345"})
    try:
        stats = deployment.node.stats(deployment.tenants["acme"].admin_token)
        assert stats["gc_thresholds"][0] == 12345
        assert len(stats["gc_thresholds"]) == 3
    finally:
        deployment.stop()
