"""The node a fuzz module runs against: the embedded default, or one node on PostgreSQL and
Redis (a module's BACKEND says which): what one database stores without complaint (an
integer past 64 bits, a NUL) the other may refuse with a traceback."""

from __future__ import annotations

import pytest

from tests.conftest import QimDeployment, start_cluster, start_embedded


def start_node(request: pytest.FixtureRequest, extra_env: dict[str, str] | None = None) -> QimDeployment:
    backend = request.module.BACKEND
    work_dir = request.getfixturevalue("work_dir")
    if backend == "sqlite":
        return start_embedded(request.getfixturevalue("sqlite_template"), work_dir, extra_env=extra_env)
    assert backend == "postgres", backend
    return start_cluster(
        request.getfixturevalue("postgres"), request.getfixturevalue("pg_template"),
        request.getfixturevalue("redis_proc"), work_dir, nodes=1, extra_env=extra_env,
    )
