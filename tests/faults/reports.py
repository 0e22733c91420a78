"""Fault test results (checker counts, recovery times) printed and kept in var/fault-results.json."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.harness.checker import Verdict
from tests.harness.qim_process import REPO
from tests.harness.repo_lock import repo_lock

RESULTS = REPO / "var" / "fault-results.json"


def record_result(scenario: str, verdict: Verdict, **extra: Any) -> dict[str, Any]:
    """Print the scenario's verdict and merge it into var/fault-results.json (newest run wins)."""
    entry = {**verdict.summary(), **extra, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"\nfault scenario {scenario}: {json.dumps(entry)}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with repo_lock():  # pytest-xdist workers may record at once
        try:
            results = json.loads(RESULTS.read_text())
        except (OSError, ValueError):
            results = {}
        results[scenario] = entry
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return entry
