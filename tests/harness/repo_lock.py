"""One lock across the test run's worker processes (pytest-xdist) for steps that write into
the repository itself: `npm ci` in clients/js and the web client's build into clients/web."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = Path(__file__).resolve().parents[2] / "var" / ".tests-repo.lock"


@contextmanager
def repo_lock() -> Iterator[None]:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
