"""Fixtures of the size-cap tests in this folder: a node whose outbound frame cap is the test
module's CAP, so a few big replies must be cut."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import TenantHandle


@pytest.fixture(scope="module")
def capped(request: pytest.FixtureRequest, sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_MAX_OUTBOUND_FRAME_BYTES": str(request.module.CAP), "QIM_PER_USER_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


@pytest.fixture
async def tenant(capped: QimDeployment) -> AsyncIterator[TenantHandle]:
    handle = capped.tenants["acme"]
    yield handle
    await handle.close_clients()
