"""The members caches behind REACT and REACTION_UPDATE: a leave or removal on this node is
seen at once (before, a removed member kept getting REACTION_UPDATE for up to 5 s), and the
TTL runs on a clock the caller gives, so it can be moved instead of slept through."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reactions.member_cache import TtlCache
from tests.conftest import QimDeployment, start_embedded
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import api_ok


@pytest.fixture(scope="module")
def short_window(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_REACTION_PUSH_MERGE_WINDOW_S": "0.3"})
    yield deployment
    deployment.stop()


def test_ttl_cache_reloads_after_its_ttl_on_the_given_clock() -> None:
    now = [100.0]
    loads: list[int] = []
    cache: TtlCache[int] = TtlCache(5.0, clock=lambda: now[0])

    def load() -> int:
        loads.append(1)
        return len(loads)

    assert cache.get("c", load) == 1
    now[0] += 4.9
    assert cache.get("c", load) == 1
    now[0] += 0.2
    assert cache.get("c", load) == 2
    cache.forget("c")
    assert cache.get("c", load) == 3 and len(loads) == 3


async def update_with_version(client, version: int) -> dict:  # type: ignore[no-untyped-def]
    while True:
        frame = await client.next_push(timeout=30, type="REACTION_UPDATE")
        if frame["summary_version"] >= version:
            return frame


async def test_a_member_who_left_gets_no_reaction_update(short_window: QimDeployment) -> None:
    tenant = short_window.tenants["acme"]
    alice, bob, carol = tenant.persona("alice"), tenant.persona("bob"), tenant.persona("carol")
    group = create_group(alice, bob, carol)
    a, b, c = await alice.connect(), await bob.connect(), await carol.connect()
    seq = (await send_text(a, group, "react to me"))["conversation_seq"]
    await b.request("REACT", conversation_id=group, conversation_seq=seq, reaction_key="+1", action="add")
    # Carol is a member: she hears it, and the members cache now holds her.
    assert (await update_with_version(c, 1))["counts"] == {"+1": 1}
    api_ok(tenant.node, "DELETE", f"conversations/{group}/members/{carol.user_id}", carol.token())
    await b.request("REACT", conversation_id=group, conversation_seq=seq, reaction_key="heart", action="add")
    for member in (a, b):
        assert (await update_with_version(member, 2))["counts"] == {"+1": 1, "heart": 1}
    await c.request("PING")  # a round trip on carol's socket: a push written before it is queued by now
    assert [f for f in c.drain_pushes() if f["type"] == "REACTION_UPDATE"] == []
