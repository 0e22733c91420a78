"""The admin's rooms page while Redis is down (its own redis-server, killed): the page still
answers 200 and says "unavailable" for what only Redis and the writer know, instead of a 500;
when Redis is back, the live values return."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.harness.admin_session import AdminSession, create_operator
from tests.harness.redis_server import RedisServer
from tests.rooms.room_helpers import create_room, join


@pytest.fixture(scope="module")
def deployment(postgres, pg_template, own_redis, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, own_redis, work_dir)
    yield deployment
    deployment.stop()


def live_cells(operator: AdminSession, room: str) -> list[str]:
    """writer node, online count, room epoch of the room's row."""
    rows = operator.rows(f"/admin/rooms/room/?q={room}")
    return [re.sub(r"<[^>]+>", "", re.search(rf'class="field-{name}"[^>]*>(.*?)</td>', rows, re.S).group(1)).strip()
            for name in ("writer_node", "online_count", "live_epoch")]


async def test_the_rooms_page_answers_during_a_redis_outage_and_recovers(
    deployment: QimDeployment, own_redis: RedisServer
) -> None:
    n1, n2 = deployment.nodes
    acme = deployment.tenants["acme"]
    operator = AdminSession(n2, create_operator(deployment.env))
    alice = acme.persona("alice")
    room = create_room(alice)
    await join(await alice.connect(n1), room)
    assert live_cells(operator, room)[:2] == [n1.node_id, "1"]

    own_redis.kill()
    try:
        assert live_cells(operator, room)[:2] == ["unavailable", "unavailable"]
    finally:
        await acme.close_clients()
        own_redis.start()
    deadline = time.monotonic() + 90
    while live_cells(operator, room)[:2] != ["none (empty)", "0"]:
        assert time.monotonic() < deadline, live_cells(operator, room)
        await asyncio.sleep(0.5)
    operator.close()
