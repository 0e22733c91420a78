"""QIM_CHANNEL_LAYER_REDIS_URLS: the channel layer over two Redis servers (channels-redis
hashes each channel over them). Each node listens for its channel on the shard the hash
names, and pushes and rooms still cross the nodes both ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis
from channels_redis.utils import _consistent_hash

from tests.conftest import QimDeployment, start_cluster
from tests.faults.probes import probe_parties, wait_until
from tests.harness.personas import TenantHandle
from tests.harness.redis_server import RedisServer


@pytest.fixture(scope="module")
def shards() -> Iterator[list[RedisServer]]:
    servers = [RedisServer().start(), RedisServer().start()]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def sharded_cluster(postgres, pg_template, shards: list[RedisServer], work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, shards[0], work_dir, extra_env={
        "QIM_CHANNEL_LAYER_REDIS_URLS": ",".join(s.url for s in shards),
    })
    yield deployment
    deployment.stop()


def layer_keys_on(server: RedisServer) -> list[str]:
    with redis.Redis(port=server.port, decode_responses=True) as client:
        return list(client.scan_iter("qim:layer:*"))


def listeners_on(server: RedisServer) -> list[str]:
    """The keys this server's clients are blocked popping (a node waiting for its channel)."""
    with redis.Redis(port=server.port, decode_responses=True) as client:
        return [c["cmd"] for c in client.client_list() if c["cmd"] in ("bzpopmin", "bzpopmax")]


async def test_each_node_listens_on_its_shard_and_traffic_crosses(
    sharded_cluster: QimDeployment, shards: list[RedisServer]
) -> None:
    n1, n2 = sharded_cluster.nodes
    tenant: TenantHandle = sharded_cluster.tenants["acme"]
    parties = await probe_parties(tenant, n1, n2)
    # A node listens once it has a socket: every shard the hash names for a node's channel
    # then has a client blocked popping it.
    expected = {node.node_id: _consistent_hash(f"qim.node.{node.node_id}", len(shards)) for node in (n1, n2)}
    deadline = time.monotonic() + 60
    while not all(listeners_on(shards[index]) for index in set(expected.values())):
        assert time.monotonic() < deadline, f"no listener on the shards {expected}"
        await asyncio.sleep(0.2)
    # The nodes' groups hash to both shards (qim.registry to the first, qim.credentials to the
    # second): with one host configured the second would hold nothing.
    assert {_consistent_hash(g, 2) for g in ("qim.registry", "qim.credentials")} == {0, 1}
    while not all(layer_keys_on(shard) for shard in shards):
        assert time.monotonic() < deadline, [layer_keys_on(shard) for shard in shards]
        await asyncio.sleep(0.2)
    errors: list[str] = []
    for probe in parties.probes((n1, n2)):
        await wait_until(probe, errors, 60)
    assert errors == []
    await tenant.close_clients()
