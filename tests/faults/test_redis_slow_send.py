"""Issue #20: a SEND never waits for Redis while it holds the conversation's row lock.

A counted SEND asks the presence directory (Redis) which recipients are online, to queue a
PushTask for each offline device. The scenario makes exactly that question slow: a proxy in
front of the real redis-server holds it, everything else flows. While it is held, another
write to the same conversation (a member added over REST, which asks Redis nothing before
committing) must commit: it could not if the held SEND had taken the row lock first. Once
released, the SEND commits after it, and the offline device still gets its push.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group
from tests.core.test_offline_push import push_tasks, register_push
from tests.harness.personas import api_ok
from tests.harness.redis_hold import RedisHoldProxy
from tests.harness.redis_server import RedisServer

pytestmark = pytest.mark.faults

PATIENCE_S = 90


@pytest.fixture(scope="module")
def proxy() -> Iterator[RedisHoldProxy]:
    server = RedisServer().start()
    holder = RedisHoldProxy(server.host, server.port, matches=lambda data: False).start()
    yield holder
    holder.stop()
    server.stop()


@pytest.fixture(scope="module")
def slow_cluster(postgres, pg_template, proxy, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    # The held read must outwait the test however loaded the machine is: only the proxy's
    # release ends it, never redis-py's 5 s reply timeout.
    deployment = start_cluster(
        postgres, pg_template, proxy, work_dir, nodes=1, extra_env={"QIM_REDIS_SOCKET_TIMEOUT_S": "3600"},
    )
    yield deployment
    deployment.stop()


def presence_read_of(user_id: str):  # type: ignore[no-untyped-def]
    """The online-devices read of one user: ZRANGEBYSCORE on their presence device key."""
    key = b"qim:presence:device:"
    user = f":{user_id}\r\n".encode()
    return lambda data: b"ZRANGEBYSCORE" in data.upper() and key in data and user in data


async def wait_until(probe, what: str) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not probe():
        assert time.monotonic() - started < PATIENCE_S, f"still not true after {PATIENCE_S} s: {what}"
        await asyncio.sleep(0.1)


async def test_a_send_waiting_for_redis_holds_no_lock(slow_cluster: QimDeployment, proxy: RedisHoldProxy) -> None:
    acme = slow_cluster.tenants["acme"]
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    register_push(bob, "phone")  # offline with credentials: a counted SEND asks about him
    group = create_group(alice, bob)
    a = await alice.connect()
    db = slow_cluster.db
    messages = "conversation_id = ? AND kind = 'message'"
    carol_in = "conversation_id = ? AND user_id = (SELECT id FROM qim_user WHERE username = ?)"

    proxy.matches = presence_read_of(bob.user_id)
    proxy.hold()
    try:
        send = asyncio.create_task(a.request_frame({
            "type": "SEND", "conversation_id": group, "client_msg_id": "held",
            "content_type": "text", "payload": {"text": "held"},
        }, timeout=PATIENCE_S * 3))
        await wait_until(lambda: proxy.waiting >= 1, "the SEND asked Redis who is online")
        # Another write to the same conversation, asking Redis nothing before it commits.
        adding = asyncio.create_task(asyncio.to_thread(
            api_ok, acme.node, "POST", f"conversations/{group}/members", alice.token(),
            json={"user_ids": [carol.user_id]},
        ))
        await wait_until(
            lambda: db.count("qim_membershipinterval", carol_in, (group, carol.user_id)) == 1,
            "the member added while the SEND waited for Redis committed",
        )
        assert not send.done() and proxy.waiting >= 1
        assert db.count("qim_messagerecord", messages, (group,)) == 0
    finally:
        proxy.release()
    ack = await send
    await adding
    # The SEND locked the conversation only after the membership event was logged.
    [(join_seq,)] = db.query(
        "SELECT max(conversation_seq) FROM qim_messagerecord WHERE conversation_id = ? AND kind = 'control'", (group,),
    )
    assert ack["type"] == "ACK" and ack["conversation_seq"] == join_seq + 1
    assert db.count("qim_messagerecord", messages, (group,)) == 1
    assert push_tasks(slow_cluster, bob, "phone") == 1
    assert push_tasks(slow_cluster, carol) == 0  # carol has no push credentials
