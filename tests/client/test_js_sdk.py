"""The TypeScript SDK (clients/js) run by `make test`: npm ci when needed, build, then its
`node --test` suite, which starts its own QIM server with this interpreter (QIM_PYTHON).
Passes when the runner exits 0 and its summary counts passed tests and no failure."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.repo_lock import repo_lock

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "js"
SUMMARY = re.compile(r"^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$", re.MULTILINE)


def run(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(1800)
def test_js_sdk_suite_passes_against_a_real_server() -> None:
    npm = shutil.which("npm")
    assert npm is not None and shutil.which("node") is not None, "node and npm are needed (make services installs them)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QIM_")}
    env["QIM_PYTHON"] = sys.executable
    with repo_lock():  # the web client's build (another pytest-xdist worker) may be installing too
        if not (PACKAGE / "node_modules").is_dir():
            installed = run([npm, "ci", "--no-audit", "--no-fund"], env, timeout=900)
            assert installed.returncode == 0, installed.stdout[-4000:] + installed.stderr[-4000:]
    done = run([npm, "test"], env, timeout=1500)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    counts = {name: int(value) for name, value in SUMMARY.findall(done.stdout)}
    assert counts.get("pass", 0) >= 20, output[-8000:]
    assert counts.get("fail") == 0 and counts.get("cancelled") == 0 and counts.get("skipped") == 0, counts
