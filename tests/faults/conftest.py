"""Fixtures of the fault scenarios: a Redis that closes no idle connection."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from pytest_redis import factories

from tests.harness.redis_server import RedisServer

# pytest-redis starts redis-server with `timeout 15`: connections idle for 15 s are closed by
# the server, and a node's pooled Redis connection then fails its next command once (redis-py
# does not retry by default; the fix, a retrying client, is qim/infra/outage.py on branch
# faultsredis). These scenarios inject one fault each, the database or a node; so that no
# second fault sneaks in, their nodes share this Redis, which keeps idle connections (an
# hour is far longer than any test here), as redis-server does by default.
# start_cluster numbers Redis dbs across the session: as many as the session Redis has.
quiet_redis = factories.redis_proc(
    executable=shutil.which("redis-server") or "/usr/bin/redis-server", port=None, db_count=64, timeout=3600
)


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test module's own, which it may kill and start again."""
    server = RedisServer().start()
    yield server
    server.stop()
