"""RTC fixtures: each lifecycle test runs on the embedded default and on two nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.conftest import QimDeployment
from tests.harness.personas import TenantHandle
from tests.harness.qim_process import QimNode


@dataclass
class Rig:
    """A deployment and its acme tenant; caller and callee sit on different nodes when there
    are two (the embedded default has one node, so both are the same). Tests put a user's
    second device on the other node: two devices of one user disconnecting from one node at
    once trip a KeyError in ConnectionNode.unregister (qim/gateway/node.py, reported)."""

    deployment: QimDeployment
    tenant: TenantHandle

    @property
    def caller_node(self) -> QimNode:
        return self.deployment.nodes[0]

    @property
    def callee_node(self) -> QimNode:
        return self.deployment.nodes[-1]


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def deployment(request: pytest.FixtureRequest) -> QimDeployment:
    return request.getfixturevalue(request.param)


@pytest.fixture
async def rig(deployment: QimDeployment) -> AsyncIterator[Rig]:
    tenant = deployment.tenants["acme"]
    yield Rig(deployment, tenant)
    await tenant.close_clients()
