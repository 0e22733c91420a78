"""C-1 at full scale (release-blocking): a 100 000-member group, one message, 5 000 distinct
users react once each over real sockets while 1 000 other members watch.

How the load is spread on 2 cores: the 1 000 observers hold one connection each for the whole
run; the 5 000 reactors come in waves of REACTOR_WAVE concurrent connections, each connecting,
authenticating, sending one REACT and closing, so about 1 250 sockets are open at a time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from tests.conftest import QimDeployment, start_embedded
from tests.harness.qim_process import last_json_line
from tests.harness.traffic import wait_until

MEMBERS = 100_000
REACTORS = 5_000
OBSERVERS = 1_000
REACTOR_WAVE = 250
WINDOW_S = 2.0


@pytest.fixture(scope="module")
def c1_node(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_REACTION_PUSH_MERGE_WINDOW_S": str(WINDOW_S),
        "QIM_AUTH_TIMEOUT_S": "60",  # 1 250 sockets at once on 2 cores: AUTH may queue a while
    })
    yield deployment
    deployment.stop()


HANDSHAKE_RETRIES: list[str] = []


async def open_socket(url: str, token: str) -> websockets.ClientConnection:
    # 250 handshakes at once on a 2-core machine that two xdist workers load: daphne may
    # close one before answering it (seen in a run at load 15). A client connects again; this
    # test is about the reaction storm, not the handshake, so it does too (counted, printed).
    deadline = time.monotonic() + 120
    while True:
        try:
            ws = await websockets.connect(url, max_size=None, open_timeout=60)
            break
        except websockets.InvalidMessage as refused:
            HANDSHAKE_RETRIES.append(repr(refused))
            assert time.monotonic() < deadline, f"no handshake in 120 s: {HANDSHAKE_RETRIES[-3:]}"
            await asyncio.sleep(0.5)
    await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": "populated"}))
    ok = json.loads(await ws.recv())
    assert ok["type"] == "AUTH_OK", ok
    return ws


async def observe(ws: websockets.ClientConnection, frames: list[tuple[float, dict]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            raw = await asyncio.wait_for(ws.recv(), 0.5)
        except TimeoutError:
            continue
        frame = json.loads(raw)
        if frame["type"] == "REACTION_UPDATE":
            frames.append((time.monotonic(), frame))


async def react_once(url: str, token: str, group: str, seq: int) -> dict:
    ws = await open_socket(url, token)
    try:
        await ws.send(json.dumps({"type": "REACT", "req_id": "r", "conversation_id": group,
                                  "conversation_seq": seq, "reaction_key": "+1", "action": "add"}))
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("req_id") == "r":
                return frame
    finally:
        await ws.close()


def snapshot(db) -> dict:  # type: ignore[no-untyped-def]
    return {
        "mailbox": db.count("qim_usermailboxentry"),
        "push_tasks": db.count("qim_pushtask"),
        "messages": db.count("qim_messagerecord"),
        "badges": db.query("SELECT count(*), coalesce(sum(badge), 0), coalesce(sum(badge * user_id), 0) FROM qim_userbadgestate")[0],
        "order": db.query("SELECT id, last_seq, last_activity_seq, last_activity_ms FROM qim_conversation ORDER BY id"),
        "cursors": db.query("SELECT count(*), coalesce(sum(read_conversation_seq), 0) FROM qim_readcursor")[0],
    }


# Populating 100 000 users alone took 112 s at load 15 (two xdist workers and more): the
# suite's 300 s per test (pytest.ini) is too tight for this one test; it bounds a hang only.
@pytest.mark.timeout(900)
async def test_c1_reaction_storm_at_full_scale(c1_node: QimDeployment, work_dir: Path) -> None:
    node, db = c1_node.node, c1_node.db
    started = time.monotonic()
    tokens_file = work_dir / "c1-tokens.json"
    out = last_json_line(c1_node.manage("qim_populate", "--tenant", "acme", "--users", str(MEMBERS), "--group", "c1",
                                        "--group-members", str(MEMBERS), "--tokens-out", str(tokens_file)))
    data = json.loads(tokens_file.read_text())
    users, group = list(data["users"].items()), data["group"]
    print(f"\npopulate {MEMBERS} users + group: {out['seconds']} s")

    author = await open_socket(node.ws_url, users[0][1])
    await author.send(json.dumps({"type": "SEND", "req_id": "s", "conversation_id": group, "client_msg_id": "c1",
                                  "content_type": "text", "payload": {"text": "react to this"}}))
    while (ack := json.loads(await author.recv())).get("req_id") != "s":
        pass
    seq = ack["conversation_seq"]
    await author.close()
    print(f"one message to {MEMBERS} members: {time.monotonic() - started:.1f} s since start")

    reactors = [token for _, token in users[1 : 1 + REACTORS]]
    observer_tokens = [token for _, token in users[1 + REACTORS : 1 + REACTORS + OBSERVERS]]
    offline_token = users[-1][1]
    observers = [await open_socket(node.ws_url, t) for t in observer_tokens]
    frames: list[list[tuple[float, dict]]] = [[] for _ in observers]
    stop = asyncio.Event()
    watchers = [asyncio.create_task(observe(ws, frames[i], stop)) for i, ws in enumerate(observers)]
    before = snapshot(db)

    storm_started = time.monotonic()
    acks: list[dict] = []
    for start in range(0, REACTORS, REACTOR_WAVE):
        wave = reactors[start : start + REACTOR_WAVE]
        acks += await asyncio.gather(*(react_once(node.ws_url, t, group, seq) for t in wave))
    storm_s = time.monotonic() - storm_started
    # The trailing push of the last window, however late a loaded machine delivers it.
    await wait_until(lambda: all(f and f[-1][1]["counts"] == {"+1": REACTORS} for f in frames), 120,
                     "every observer's last REACTION_UPDATE with every reaction counted")
    stop.set()
    await asyncio.gather(*watchers)
    for ws in observers:
        await ws.close()
    print(f"{REACTORS} reactions in {storm_s:.1f} s = {REACTORS / storm_s:.0f} REACT/s; "
          f"{len(HANDSHAKE_RETRIES)} handshakes retried")

    assert [a["type"] for a in acks].count("ACK") == REACTORS
    after = snapshot(db)
    assert after["mailbox"] == before["mailbox"], "a reaction wrote a UserMailboxEntry"
    assert after["push_tasks"] == before["push_tasks"], "a reaction wrote a PushTask"
    assert after["messages"] == before["messages"]
    assert after["badges"] == before["badges"], "a reaction changed a badge"
    assert after["order"] == before["order"], "a reaction moved a conversation"
    assert after["cursors"] == before["cursors"]
    assert db.count("reactions_messagereactionsummary", "conversation_id = ?", (group,)) == 1
    assert db.query("SELECT counts FROM reactions_messagereactionsummary WHERE conversation_id = ?", (group,))[0][0] in (
        '{"+1": 5000}', '{"+1":5000}')
    assert db.count("reactions_messagereaction", "conversation_id = ?", (group,)) == 0  # 100 000 > 1 000 members

    per_observer = [len(f) for f in frames]
    print(f"REACTION_UPDATE frames per observer: min {min(per_observer)}, max {max(per_observer)}")
    for received in frames:
        assert received, "an online observer got no REACTION_UPDATE"
        assert received[-1][1]["counts"] == {"+1": REACTORS}
        # Spacing as the server pushed them (arrival times on this busy 2-core machine jitter).
        pushed = [f["pushed_at_ms"] for _, f in received]
        gaps = [b - a for a, b in zip(pushed, pushed[1:])]
        assert all(gap >= WINDOW_S * 1000 * 0.95 for gap in gaps), f"two frames within one merge window: {min(gaps)} ms"
        versions = [f["summary_version"] for _, f in received]
        assert versions == sorted(versions)

    late = await open_socket(node.ws_url, offline_token)
    try:
        with pytest.raises(TimeoutError):
            while True:  # an offline member never receives a REACTION_UPDATE, not even later
                frame = json.loads(await asyncio.wait_for(late.recv(), 1.0))
                assert frame["type"] != "REACTION_UPDATE"
    finally:
        await late.close()
