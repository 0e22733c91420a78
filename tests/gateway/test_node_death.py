"""A node killed with SIGKILL leaves no ghost presence (its users' watchers are told they went
offline), and clients reconnect elsewhere."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.conftest import QimDeployment, start_cluster


@pytest.fixture(scope="module")
def short_ttl_cluster(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(
        postgres, pg_template, redis_proc, work_dir, extra_env={"QIM_PRESENCE_TTL_S": "1.5"}
    )
    yield deployment
    deployment.stop()


async def test_a_killed_nodes_users_go_offline_after_the_ttl(short_ttl_cluster: QimDeployment) -> None:
    n1, n2 = short_ttl_cluster.nodes
    tenant = short_ttl_cluster.tenants["acme"]
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    bob_client = await bob.connect(n2)
    watcher = await alice.connect(n1)
    try:
        assert await watcher.subscribe_presence([bob.user_id]) == {bob.user_id: True}
        n2.kill()  # no disconnect handler runs: only the directory's expiry can clean up
        # Node 1 notices on its heartbeat that bob's entries expired, and tells its watchers.
        pushed = await watcher.next_push(timeout=10, type="PRESENCE")
        assert (pushed["user_id"], pushed["online"]) == (bob.user_id, False)
        assert n1.stats(tenant.admin_token)["counters"]["presence_reconciled"] == 1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            state = await watcher.request("PRESENCE_SUB", user_ids=[bob.user_id])
            if state["presence"][bob.user_id] is False:
                break
            await asyncio.sleep(0.25)
        else:
            pytest.fail("bob still online 10 s after his node died")
    finally:
        await watcher.close()
        await bob_client.close()
        n2.start()


async def test_the_sdk_reconnects_after_its_node_restarts(short_ttl_cluster: QimDeployment) -> None:
    from qimclient import QimClient

    n1 = short_ttl_cluster.nodes[0]
    carol = short_ttl_cluster.tenants["acme"].persona("carol")
    client = QimClient(n1.ws_url, carol.token("phone", n1), "phone", reconnect=True)
    await client.connect()
    first_connection = client.auth_ok["connection_id"]
    try:
        n1.kill()
        n1.start()
        await client.wait_connected(timeout=15)
        deadline = time.monotonic() + 15
        while client.auth_ok["connection_id"] == first_connection and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert client.auth_ok["connection_id"] != first_connection
        assert client.reconnects >= 1
        assert (await client.request("PING"))["type"] == "PONG"
    finally:
        await client.close()
