"""RTC fixtures: each lifecycle test runs on the embedded default and on two nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from qimclient import QimClient
from tests.conftest import QimDeployment, start_cluster, start_embedded
from tests.harness.personas import Persona, TenantHandle
from tests.harness.qim_process import QimNode
from tests.rtc.rtc_helpers import new_call_id, next_signal, signal


@dataclass
class Rig:
    """A deployment and its acme tenant; caller and callee sit on different nodes when there
    are two (the embedded default has one node, so both are the same)."""

    deployment: QimDeployment
    tenant: TenantHandle

    @property
    def caller_node(self) -> QimNode:
        return self.deployment.nodes[0]

    @property
    def callee_node(self) -> QimNode:
        return self.deployment.nodes[-1]

    async def ringing_on_two_devices(
        self, caller: Persona, callee: Persona, conversation: str
    ) -> tuple[QimClient, QimClient, QimClient, str]:
        """The caller's device and the callee's phone (callee node) and tablet (caller node),
        both ringing a new call: answers (caller, phone, tablet, call_id)."""
        a = await caller.connect(self.caller_node)
        phone = await callee.connect(self.callee_node, device_id="phone")
        tablet = await callee.connect(self.caller_node, device_id="tablet")
        call = new_call_id()
        assert (await signal(a, conversation, callee, call, "invite"))["delivered_connections"] == 2
        for client in (phone, tablet):
            assert (await next_signal(client))["action"] == "invite"
        return a, phone, tablet, call


def start_either(request: pytest.FixtureRequest, work_dir: Path, env: dict[str, str]) -> QimDeployment:
    """For a fixture parametrized "embedded" / "cluster": that deployment, started with `env`."""
    if request.param == "embedded":
        return start_embedded(request.getfixturevalue("sqlite_template"), work_dir, extra_env=env)
    return start_cluster(
        request.getfixturevalue("postgres"), request.getfixturevalue("pg_template"),
        request.getfixturevalue("redis_proc"), work_dir, extra_env=env,
    )


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def deployment(request: pytest.FixtureRequest) -> QimDeployment:
    return request.getfixturevalue(request.param)


@pytest.fixture
async def rig(deployment: QimDeployment) -> AsyncIterator[Rig]:
    tenant = deployment.tenants["acme"]
    yield Rig(deployment, tenant)
    await tenant.close_clients()
