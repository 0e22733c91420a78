"""QIM_GC_YOUNG_THRESHOLD, QIM_GC_MIDDLE_THRESHOLD and QIM_GC_OLD_THRESHOLD set the node's
collector thresholds at start-up (qim/asgi.py); GET /api/v1/node says which are in force, and
counts the passes the collector made per generation and the milliseconds they took
(qim/infra/gc_pauses.py)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.conftest import start_embedded


def test_the_thresholds_are_the_settings(sqlite_template: Path, work_dir: Path) -> None:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_GC_YOUNG_THRESHOLD": "12345", "QIM_GC_MIDDLE_THRESHOLD": "3", "QIM_GC_OLD_THRESHOLD": "77"})
    try:
        stats = deployment.node.stats(deployment.tenants["acme"].admin_token)
        assert stats["gc_thresholds"] == [12345, 3, 77]
        passes = stats["gc_collections"]  # young, middle, full
        assert len(passes) == 3 and all(isinstance(n, int) and n >= 0 for n in passes), passes
        paused = stats["gc_pause_ms"]
        assert len(paused) == 3 and all(isinstance(ms, (int, float)) and ms >= 0 for ms in paused), paused
        # Requests until a young pass happens (each leaves objects behind): its time is counted.
        node, token = deployment.node, deployment.tenants["acme"].admin_token
        deadline = time.monotonic() + 30
        with httpx.Client(headers={"Authorization": f"Token {token}"}) as http:
            while (after := node.stats(token))["gc_collections"][0] == passes[0] and time.monotonic() < deadline:
                for _ in range(20):
                    http.get(f"{node.http_url}/api/v1/node").raise_for_status()
        assert after["gc_collections"][0] > passes[0], after
        assert after["gc_pause_ms"][0] > paused[0], (paused, after["gc_pause_ms"])
    finally:
        deployment.stop()
