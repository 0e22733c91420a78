"""Fuzz modules idle between phases (hypothesis shrinking, one test's setup) for longer than
pytest-redis' default client timeout (15 s), after which the test Redis closes idle
connections and the node's rate limiter fails its next call once (reported in issue #17's
notes, left to the rate limiting work). Production Redis keeps idle clients (`timeout 0`);
this one keeps them a day (pytest-redis reads 0 as "use the default"), so the fuzzers test
input handling, not that."""

from __future__ import annotations

import shutil

from pytest_redis import factories

redis_proc = factories.redis_proc(
    executable=shutil.which("redis-server") or "/usr/bin/redis-server", port=None, db_count=64, timeout=86_400
)
