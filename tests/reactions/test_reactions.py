"""REACT over real sockets: idempotency, thresholds, rate, walls, merged online-only pushes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment, start_embedded
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.personas import TenantHandle
from tests.harness.traffic import wait_until


async def react(client, group: str, seq: int, key: str = "+1", action: str = "add") -> dict:  # type: ignore[no-untyped-def]
    return await client.request("REACT", conversation_id=group, conversation_seq=seq, reaction_key=key, action=action)


def rows(deployment: QimDeployment, table: str, group: str) -> int:
    return deployment.db.count(table, "conversation_id = ?", (group,))


@pytest.fixture(scope="module")
def small_limits(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_REACTION_DETAIL_MAX_MEMBERS": "3", "QIM_REACTION_DETAIL_MAX_PER_MESSAGE": "2",
        "QIM_PER_USER_REACTION_RATE": "100", "QIM_REACTION_PUSH_MERGE_WINDOW_S": "0.5",
        "QIM_REACTION_MAX_KEYS_PER_MESSAGE": "3",
    })
    yield deployment
    deployment.stop()


async def test_add_twice_remove_absent_and_remove(embedded: QimDeployment, acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    seq = (await send_text(a, group, "react to me"))["conversation_seq"]
    first = await react(b, group, seq)
    assert first["counts"] == {"+1": 1} and first["summary_version"] == 1
    again = await react(b, group, seq)
    assert again == {**again, "counts": {"+1": 1}, "summary_version": 1}
    absent = await react(b, group, seq, key="heart", action="remove")
    assert absent["counts"] == {"+1": 1} and absent["summary_version"] == 1
    await react(a, group, seq, key="heart")
    removed = await react(b, group, seq, action="remove")
    assert removed["counts"] == {"heart": 1} and removed["summary_version"] == 3
    assert rows(embedded, "reactions_messagereaction", group) == 1
    history = await b.request("HISTORY", conversation_id=group)
    assert history["messages"][0]["reactions"] == {"counts": {"heart": 1}, "summary_version": 3}


async def test_reactions_touch_no_mailbox_unread_order_or_push_rows(embedded: QimDeployment, acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    seq = (await send_text(a, group, "x"))["conversation_seq"]
    before_list = await a.request("CONVERSATIONS")
    counted = [embedded.db.count(t) for t in ("qim_usermailboxentry", "qim_pushtask", "qim_messagerecord")]
    badges = embedded.db.query("SELECT user_id, badge FROM qim_userbadgestate ORDER BY user_id")
    await react(b, group, seq, key="wow")
    await asyncio.sleep(0.3)
    assert [embedded.db.count(t) for t in ("qim_usermailboxentry", "qim_pushtask", "qim_messagerecord")] == counted
    assert embedded.db.query("SELECT user_id, badge FROM qim_userbadgestate ORDER BY user_id") == badges
    after_list = await a.request("CONVERSATIONS")
    strip = lambda listing: [(i["conversation_id"], i["unread"], i["last_activity_ms"], i["preview"]) for i in listing["items"]]  # noqa: E731
    assert strip(after_list) == strip(before_list)


async def test_concurrent_duplicates_count_once(embedded: QimDeployment, acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    seq = (await send_text(a, group, "x"))["conversation_seq"]
    b1, b2 = await bob.connect(device_id="phone"), await bob.connect(device_id="laptop")
    answers = await asyncio.gather(react(b1, group, seq, "fire"), react(b2, group, seq, "fire"))
    assert {tuple(sorted(x["counts"].items())) for x in answers} == {(("fire", 1),)}
    assert rows(embedded, "reactions_messagereaction", group) == 1


async def test_refusals(embedded: QimDeployment, acme: TenantHandle, globex: TenantHandle) -> None:
    alice, bob, eve = (acme.persona(n) for n in ("alice", "bob", "eve"))
    group = create_group(alice, bob)
    a, e = await alice.connect(), await eve.connect()
    m = await globex.persona("mallory").connect()
    seq = (await send_text(a, group, "x"))["conversation_seq"]
    cases = [
        (e, {"conversation_id": group, "conversation_seq": seq, "reaction_key": "+1", "action": "add"}, "forbidden"),
        (m, {"conversation_id": group, "conversation_seq": seq, "reaction_key": "+1", "action": "add"}, "not_found"),
        (a, {"conversation_id": group, "conversation_seq": 99, "reaction_key": "+1", "action": "add"}, "not_found"),
        (a, {"conversation_id": group, "conversation_seq": seq, "reaction_key": "has space", "action": "add"}, "bad_frame"),
        (a, {"conversation_id": group, "conversation_seq": seq, "reaction_key": "x" * 33, "action": "add"}, "bad_frame"),
        (a, {"conversation_id": group, "conversation_seq": seq, "reaction_key": "+1", "action": "toggle"}, "bad_frame"),
        (a, {"conversation_id": group, "conversation_seq": "1", "reaction_key": "+1", "action": "add"}, "bad_frame"),
    ]
    for client, fields, code in cases:
        with pytest.raises(QimError) as refused:
            await client.request("REACT", **fields)
        assert refused.value.code == code, fields
    assert rows(embedded, "reactions_messagereactionsummary", group) == 0


async def test_reaction_rate_is_apart_from_the_message_rate(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    seqs = [(await send_text(a, group, f"m{i}"))["conversation_seq"] for i in range(8)]
    results = await asyncio.gather(*(react(a, group, s) for s in seqs), return_exceptions=True)
    limited = [r for r in results if isinstance(r, QimError)]
    assert len(limited) >= 3 and {r.code for r in limited} == {"rate_limited"}  # 5/s
    assert all(r.retry_after_ms >= 0 for r in limited)
    assert (await send_text(a, group, "messages still flow"))["conversation_seq"] == 9


async def test_details_stop_at_the_limits_and_idempotency_holds_past_them(small_limits: QimDeployment) -> None:
    tenant = small_limits.tenants["acme"]
    people = [tenant.persona(f"p{i}") for i in range(4)]
    small = create_group(people[0], people[1])            # 2 members: details allowed
    big = create_group(people[0], *people[1:])             # 4 members > 3: aggregate only
    clients = [await p.connect() for p in people]
    small_seq = (await send_text(clients[0], small, "s"))["conversation_seq"]
    big_seq = (await send_text(clients[0], big, "b"))["conversation_seq"]
    for key in ("a", "b", "c"):                           # 3 details > 2 per message
        await react(clients[1], small, small_seq, key)
    assert rows(small_limits, "reactions_messagereaction", small) == 2
    for client in clients:
        await react(client, big, big_seq)
        again = await react(client, big, big_seq)         # repeated add: no change
    assert again["counts"] == {"+1": 4}
    assert rows(small_limits, "reactions_messagereaction", big) == 0
    absent = await react(clients[0], big, big_seq, key="nope", action="remove")
    assert absent["counts"] == {"+1": 4}
    removed = await react(clients[0], big, big_seq, action="remove")
    twice = await react(clients[0], big, big_seq, action="remove")
    assert removed["counts"] == twice["counts"] == {"+1": 3}
    third = await react(clients[1], small, small_seq, "c", action="remove")
    assert third["counts"] == {"a": 1, "b": 1}


async def test_a_message_carries_at_most_so_many_different_keys(small_limits: QimDeployment) -> None:
    """reaction_max_keys_per_message (3 here): a fourth key is refused `conflict` and writes
    nothing; the keys it has still take reactions; a key whose count falls to 0 frees its
    place. The same with details (2 members) and past them (4 members: aggregate only)."""
    tenant = small_limits.tenants["acme"]
    people = [tenant.persona(f"k{i}") for i in range(4)]
    clients = [await p.connect() for p in people]
    assert clients[0].auth_ok["limits"]["reaction_max_keys_per_message"] == 3
    for group in (create_group(people[0], people[1]), create_group(people[0], *people[1:])):
        seq = (await send_text(clients[0], group, "react"))["conversation_seq"]
        for key in ("a", "b", "c"):
            await react(clients[1], group, seq, key)
        with pytest.raises(QimError) as refused:
            await react(clients[1], group, seq, "d")
        assert refused.value.code == "conflict"
        history = await clients[0].request("HISTORY", conversation_id=group)
        assert history["messages"][0]["reactions"] == {"counts": {"a": 1, "b": 1, "c": 1}, "summary_version": 3}
        assert (await react(clients[0], group, seq, "a"))["counts"] == {"a": 2, "b": 1, "c": 1}
        await react(clients[1], group, seq, "c", action="remove")
        assert (await react(clients[1], group, seq, "d"))["counts"] == {"a": 2, "b": 1, "d": 1}


async def test_pushes_go_to_online_members_merged_per_window(small_limits: QimDeployment) -> None:
    tenant = small_limits.tenants["acme"]
    owner, online, offline = tenant.persona("owner"), tenant.persona("online"), tenant.persona("offline")
    reactors = [tenant.persona(f"r{i}") for i in range(6)]
    group = create_group(owner, online, offline, *reactors)
    o = await owner.connect()
    seq = (await send_text(o, group, "storm"))["conversation_seq"]
    watcher = await online.connect()
    arrivals: list[tuple[float, dict]] = []
    watcher.on_push("REACTION_UPDATE", lambda f: arrivals.append((time.monotonic(), f)))
    clients = [await r.connect() for r in reactors]
    for client in clients:
        await react(client, group, seq, "clap")
        await asyncio.sleep(0.1)
    # The last window's push, however late a loaded machine delivers it.
    await wait_until(lambda: bool(arrivals) and arrivals[-1][1]["counts"] == {"clap": 6}, 60,
                     "the last REACTION_UPDATE with all six reactions")
    last = arrivals[-1][1]
    assert {k: v for k, v in last.items() if k != "pushed_at_ms"} == {
        "type": "REACTION_UPDATE", "conversation_id": group, "conversation_seq": seq,
        "counts": {"clap": 6}, "summary_version": 6}
    pushed = [f["pushed_at_ms"] for _, f in arrivals]
    window_ms = 500
    assert all(b - a >= window_ms * 0.95 for a, b in zip(pushed, pushed[1:])), pushed
    assert len(arrivals) < 6
    late = await offline.connect()
    await asyncio.sleep(0.3)
    assert [f for f in late.drain_pushes() if f["type"] == "REACTION_UPDATE"] == []
    history = await late.request("HISTORY", conversation_id=group)
    assert history["messages"][0]["reactions"]["counts"] == {"clap": 6}
