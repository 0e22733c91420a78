"""Deployments of the control-event tests: the shared embedded node, and one with the merge and
self windows shortened so window tests take seconds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded, tenant_fixture

SHORT_WINDOWS = {
    "QIM_READ_SYNC_MERGE_WINDOW_S": "1",
    "QIM_RECALL_SELF_WINDOW_S": "1.5",
    "QIM_EDIT_SELF_WINDOW_S": "1.5",
}


@pytest.fixture(scope="module")
def short_windows(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=SHORT_WINDOWS)
    yield deployment
    deployment.stop()


short_acme = tenant_fixture("short_windows")
