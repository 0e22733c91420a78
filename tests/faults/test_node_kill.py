"""kill -9 one of two nodes mid-traffic (and then each in turn): their clients fail over to the
other node and SYNC, senders retry un-ACKed SENDs with the same client_msg_id, and the checker
finds nothing lost, duplicated, reordered or unexpected for any member."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group
from tests.faults.reports import record_result
from tests.harness.checker import History, Verdict
from tests.harness.personas import Persona, api_ok
from tests.harness.traffic import Device, retry_unacked, send_steadily, wait_until

pytestmark = pytest.mark.faults

PEOPLE = 6
SENDS_EACH = 24
# Generous: daphne processes and clients share a loaded 2-core machine (two xdist workers).
# The traffic's deadline spans the fault and its healing; each wait ends when it holds.
PATIENCE_S = 120


@pytest.fixture(scope="module")
def kill_cluster(postgres, pg_template, quiet_redis, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(
        postgres, pg_template, quiet_redis, work_dir, extra_env={"QIM_PER_USER_MSG_RATE": "1000"}
    )
    yield deployment
    deployment.stop()


def direct(owner, other) -> str:  # type: ignore[no-untyped-def]
    answer = api_ok(
        owner.tenant.node, "POST", "conversations", owner.token(),
        json={"kind": "direct", "member_user_ids": [owner.user_id, other.user_id]},
    )
    return answer["conversation_id"]


@dataclass
class Scene:
    """Six people over both nodes, a group and three DMs, and the history of their traffic."""

    people: list[Persona]
    group: str
    dms: dict[int, str]
    history: History = field(default_factory=History)
    devices: list[Device] = field(default_factory=list)

    @property
    def members(self) -> dict[str, list[str]]:
        return {f"{p.user_id}": [self.group, self.dms[i]] for i, p in enumerate(self.people)}

    @classmethod
    async def open(cls, cluster: QimDeployment, name: str) -> "Scene":
        n1, n2 = cluster.nodes
        people = [cluster.tenants["acme"].persona(f"{name}{i}") for i in range(PEOPLE)]
        # Pairs (0,1), (2,3), (4,5) each have a DM whose two ends sit on different nodes.
        dms = {i: direct(people[i - i % 2], people[i - i % 2 + 1]) for i in range(PEOPLE)}
        scene = cls(people, create_group(people[0], *people[1:]), dms)
        # Even people live on node 1, odd ones on node 2; both fail over to the other.
        for i, person in enumerate(people):
            nodes = [n1, n2] if i % 2 == 0 else [n2, n1]
            scene.devices.append(await Device.open(person.user_id, person, nodes, scene.history))
        return scene

    async def traffic_with(self, fault: Callable[[], Awaitable[None]], interval: float = 0.05) -> Verdict:
        """Steady SENDs from everyone, `interval` apart; `fault` strikes after a third of them is ACKed; then
        un-ACKed SENDs are retried and every member must catch up. Answers the verdict."""
        history, members = self.history, self.members
        deadline = time.monotonic() + PATIENCE_S
        traffic = [
            asyncio.create_task(send_steadily(d, [self.group, self.dms[i]], SENDS_EACH, interval, deadline))
            for i, d in enumerate(self.devices)
        ]
        await wait_until(lambda: sum(1 for s in history.sends.values() if s.acks) >= PEOPLE * SENDS_EACH // 3,
                         PATIENCE_S, "a third of the traffic ACKed")
        history.fault()
        await fault()
        await asyncio.gather(*traffic)
        await retry_unacked(self.devices, history, deadline)
        assert history.unacked() == []
        await wait_until(lambda: history.missing(members) == 0, PATIENCE_S, "every member caught up",
                         describe=lambda: history.check(members).describe())
        return history.check(members)

    def rows(self, cluster: QimDeployment) -> int:
        conversations = (self.group, self.dms[0], self.dms[2], self.dms[4])
        return cluster.db.count("qim_messagerecord", "conversation_id IN (?, ?, ?, ?)", conversations)

    async def close(self) -> None:
        for device in self.devices:
            await device.close()


async def test_a_node_killed_mid_traffic_loses_nothing(kill_cluster: QimDeployment) -> None:
    n1, _ = kill_cluster.nodes
    scene = await Scene.open(kill_cluster, "p")

    async def kill_node_1() -> None:
        n1.kill()

    try:
        verdict = await scene.traffic_with(kill_node_1)
        moved = sum(d.client.node_changes > 0 for d in scene.devices[::2])
        # Node 1 comes back; a new device of the first person there SYNCs everything from the start.
        n1.start()
        first = scene.people[0]
        scene.devices.append(await Device.open("tablet", first, [n1], scene.history, device_id="tablet"))
        members_after = {**scene.members, "tablet": scene.members[first.user_id]}
        await wait_until(lambda: scene.history.missing(members_after) == 0, PATIENCE_S, "the late device caught up",
                         describe=lambda: scene.history.check(members_after).describe())
        final = scene.history.check(members_after)
    finally:
        await scene.close()

    record_result(
        "node_kill", verdict, failed_over=moved, retried=sum(bool(s.failures) for s in scene.history.sends.values()),
        late_device={k: v for k, v in final.summary().items() if k != "recovery_time_s"},
    )
    verdict.assert_clean()
    final.assert_clean()
    assert verdict.acked == PEOPLE * SENDS_EACH
    assert moved == PEOPLE // 2  # every client of the dead node reconnected to the other
    assert verdict.recovery_time is not None
    assert scene.rows(kill_cluster) == PEOPLE * SENDS_EACH  # one row per client_msg_id: no retry wrote twice


async def test_both_nodes_killed_in_turn_lose_nothing(kill_cluster: QimDeployment) -> None:
    """Node 2 dies and restarts, then node 1 dies: everyone ends on the restarted node 2."""
    n1, n2 = kill_cluster.nodes
    scene = await Scene.open(kill_cluster, "r")
    odd_people = {p.user_id for p in scene.people[1::2]}  # home on node 2: only node 1's death cuts them off

    async def kill_both_in_turn() -> None:
        n2.kill()
        await wait_until(lambda: all(d.client.ws_url == n1.ws_url and d.client.is_connected for d in scene.devices),
                         PATIENCE_S, "every device on node 1")
        await asyncio.to_thread(n2.start)
        n1.kill()
        scene.history.healed()  # recovery counts what was sent until the second death too

    try:
        # Slower traffic, so that it still runs when node 1 dies after node 2's restart.
        verdict = await scene.traffic_with(kill_both_in_turn, interval=0.5)
        on_node_2 = sum(d.client.ws_url == n2.ws_url for d in scene.devices)
        sending_at_second_kill = any(s.failures for s in scene.history.sends.values() if s.sender in odd_people)
    finally:
        await scene.close()

    record_result("node_kill_both_in_turn", verdict, retried=sum(bool(s.failures) for s in scene.history.sends.values()),
                  sending_at_second_kill=sending_at_second_kill)
    verdict.assert_clean()
    assert verdict.acked == PEOPLE * SENDS_EACH and on_node_2 == PEOPLE
    assert scene.rows(kill_cluster) == PEOPLE * SENDS_EACH
