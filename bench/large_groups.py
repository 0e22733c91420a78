"""A 100 000-member group in the `mention_only` tier (design §4.3, issue #34) on PostgreSQL,
one node: what a SEND costs the database, how fast SENDs go into it against a 10-member
group with the same senders, and how fast they reach 2 000 members online (--quick: 500).

    python bench/large_groups.py [--quick]

Phases, in order, all from the same SENDERS users (members of both groups):
1. closed loop into the 10-member group (`full` tier, as small groups are) for PHASE_S: SEND/s;
2. closed loop into the large group for PHASE_S: SEND/s (`sends_100000_vs_10` = 2 over 1);
3. 20 SEND/s into the large group for PACED_S: SEND ACK p99, and SEND to arrival at the online
   members (the message's `sent_at_ms`, stamped before the commit, to the frame's arrival in
   the members' processes, same clock): `delivery_100000_p99_ms`; rows the database inserted,
   updated or deleted per SEND, from pg_stat_user_tables before and after (read after
   PostgreSQL's idle stats flush): `rows_per_send_100000`;
4. SENDs that mention sampled online members, and MARK_READs by some of them at random
   positions; then SAMPLE members ask CONVERSATIONS and their `unread` and `mention_count` are
   checked against a recount from the log in SQL: `unread_recount_mismatches`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from pathlib import Path
from typing import Any

from common import Backend, CpuMeter, bootstrap, emit, percentile, populate, print_table, start_node, work_directory
from loadgen import Target, _ctx, _get_while_alive, open_all, wait_event

MEMBERS = 100_000
SENDERS = 4
PACED_RATE = 20
OBSERVER_PROCESSES = 2
# PostgreSQL (15) flushes a backend's table counters when it has been idle this long.
PG_STATS_IDLE_FLUSH_S = 11.5
SENT_AT = re.compile(rb'"sent_at_ms":(\d+)')
MESSAGE_ID = re.compile(rb'"message_id":"([0-9A-Z]{26})"')
SEQ = re.compile(rb'"conversation_seq":(\d+)')


def observer_process(url: str, group: str, members: list[tuple[str, str]], ready, marks, recount, results) -> None:  # type: ignore[no-untyped-def]
    """Online members: note each live message's delay; on `marks`, MARK_READ at a seen seq
    (every third member); on `recount`, the group's list item of every member."""
    from common import raise_nofile

    raise_nofile()

    async def main() -> None:
        sockets = await open_all(Target("qim", url), [token for _, token in members])
        arrivals: list[tuple[str, float]] = []
        seqs: list[int] = []
        replies: dict[int, asyncio.Future] = {}
        loop = asyncio.get_running_loop()

        def handler(i: int):  # type: ignore[no-untyped-def]
            def on_text(payload: bytes) -> None:
                if payload.startswith(b'{"type":"EVENT"'):
                    now = time.time() * 1000
                    sent, message = SENT_AT.search(payload), MESSAGE_ID.search(payload)
                    if sent and message:
                        arrivals.append((message.group(1).decode(), now - int(sent.group(1))))
                    if i == 0 and (seq := SEQ.search(payload)):
                        seqs.append(int(seq.group(1)))
                elif b'"req_id":"q' in payload and i in replies and not replies[i].done():
                    replies[i].set_result(json.loads(payload))
            return on_text

        for i, ws in enumerate(sockets):
            ws.on_text = handler(i)
        ready.put({"connected": len(sockets)})

        await wait_event(marks)
        picked = random.Random(7)
        for i, ws in enumerate(sockets):
            if i % 3 == 0 and seqs:
                ws.send_text(json.dumps({"type": "MARK_READ", "req_id": "m", "conversation_id": group,
                                         "read_conversation_seq": picked.choice(seqs)}))
        await asyncio.sleep(2)

        await wait_event(recount)
        listed: dict[str, tuple[int, int]] = {}
        for start in range(0, len(sockets), 100):  # a hundred at a time: the node answers them all
            chunk = range(start, min(start + 100, len(sockets)))
            for i in chunk:
                replies[i] = loop.create_future()
                sockets[i].send_text(json.dumps({"type": "CONVERSATIONS", "req_id": f"q{i}"}))
            for i in chunk:
                answer = await asyncio.wait_for(replies[i], 60)
                item = next(x for x in answer["items"] if x["conversation_id"] == group)
                listed[members[i][0]] = (item["unread"], item["mention_count"])
        results.put({"arrivals": arrivals, "listed": listed})
        for ws in sockets:
            ws.abort()

    asyncio.run(main())


async def _senders(url: str, tokens: list[str]) -> list[Any]:
    sockets = await open_all(Target("qim", url), tokens)
    for ws in sockets:
        ws.on_text = None
    return sockets


async def _send(ws, group: str, n: int, tag: str, mentions: list[str] | None = None) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    frame = {"type": "SEND", "req_id": f"{tag}{n}", "conversation_id": group, "client_msg_id": f"{tag}-{n}",
             "content_type": "text", "payload": {"text": f"{tag} {n}"}}
    if mentions:
        frame["mentions"] = mentions
    began = time.monotonic()
    ws.send_text(json.dumps(frame))
    while True:
        answer = json.loads(await ws.recv(60))
        if answer.get("req_id") == f"{tag}{n}":
            if answer["type"] != "ACK":
                raise RuntimeError(answer)
            return (time.monotonic() - began) * 1000, answer


def closed_loop(url: str, tokens: list[str], group: str, seconds: float, tag: str) -> dict[str, Any]:
    """Every sender SENDs, waits for its ACK, and SENDs again, for `seconds`: SEND/s."""

    async def main() -> dict[str, Any]:
        sockets = await _senders(url, tokens)
        for i, ws in enumerate(sockets):  # warm-up, unmetered
            await _send(ws, group, i, f"{tag}w")
        deadline = time.monotonic() + seconds
        latencies: list[float] = []

        async def one(i: int, ws) -> None:  # type: ignore[no-untyped-def]
            n = 0
            while time.monotonic() < deadline:
                ms, _ = await _send(ws, group, n, f"{tag}{i}-")
                latencies.append(ms)
                n += 1

        began = time.monotonic()
        await asyncio.gather(*(one(i, ws) for i, ws in enumerate(sockets)))
        elapsed = time.monotonic() - began
        for ws in sockets:
            ws.abort()
        return {"sends": len(latencies), "per_s": round(len(latencies) / elapsed, 1),
                "p50_ms": round(percentile(latencies, 50), 1), "p99_ms": round(percentile(latencies, 99), 1)}

    return asyncio.run(main())


def paced(url: str, tokens: list[str], group: str, seconds: float, rate: float, tag: str,
          mention_pool: list[str] | None = None) -> dict[str, Any]:
    """`rate` SENDs a second spread over the senders for `seconds`: ACK latencies and the
    message ids (with `mention_pool`, each SEND mentions three of it)."""

    async def main() -> dict[str, Any]:
        sockets = await _senders(url, tokens)
        picked = random.Random(11)
        latencies: list[float] = []
        ids: list[str] = []
        total = int(seconds * rate)
        began = time.monotonic()
        pending = []
        for n in range(total):
            await asyncio.sleep(max(0.0, began + n / rate - time.monotonic()))
            ws = sockets[n % len(sockets)]
            mentions = picked.sample(mention_pool, 3) if mention_pool else None
            pending.append(asyncio.ensure_future(_send(ws, group, n, tag, mentions)))
            if len(pending) >= len(sockets):  # one in flight per socket: replies come in order
                ms, ack = await pending.pop(0)
                latencies.append(ms)
                ids.append(ack["message_id"])
        for done in pending:
            ms, ack = await done
            latencies.append(ms)
            ids.append(ack["message_id"])
        for ws in sockets:
            ws.abort()
        return {"sends": total, "latencies": latencies, "ids": ids}

    return asyncio.run(main())


def analyze(db) -> None:  # type: ignore[no-untyped-def]
    import psycopg

    with psycopg.connect(db.pg.url(db.dbname), autocommit=True) as conn:
        conn.execute("ANALYZE")


def table_writes(db) -> int:  # type: ignore[no-untyped-def]
    return int(db.query("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables")[0][0])


def recount(db, group: str, users: list[str]) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    """(unread, mention_count) of each user counted row by row from the log: counted rows
    after their cursor and join, not theirs, not recalled; mentions by name or @all."""
    rows = db.query(
        "SELECT u.username, "
        " (SELECT count(*) FROM qim_messagerecord m WHERE m.conversation_id = i.conversation_id"
        "   AND m.conversation_seq > greatest(i.joined_at, coalesce(c.read_conversation_seq, 0))"
        "   AND m.counts_unread AND m.state IN ('normal', 'edited') AND m.sender_id <> u.id), "
        " (SELECT count(*) FROM qim_messagerecord m WHERE m.conversation_id = i.conversation_id"
        "   AND m.conversation_seq > greatest(i.joined_at, coalesce(c.read_conversation_seq, 0))"
        "   AND m.kind = 'message' AND m.state IN ('normal', 'edited') AND m.sender_id <> u.id"
        "   AND (m.mention_all OR m.mentions::jsonb @> jsonb_build_array(u.username))) "
        "FROM qim_membershipinterval i JOIN qim_user u ON u.id = i.user_id "
        "LEFT JOIN qim_readcursor c ON c.user_id = i.user_id AND c.conversation_id = i.conversation_id "
        "WHERE i.conversation_id = ? AND i.left_at IS NULL AND u.username = ANY(?)",
        (group, users),
    )
    return {name: (unread, mentions) for name, unread, mentions in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 online, shorter phases")
    args = parser.parse_args()
    online, phase_s, paced_s, sample = (500, 3.0, 8.0, 300) if args.quick else (2000, 5.0, 20.0, 1000)
    with work_directory() as work_dir:
        backend = Backend("postgres", work_dir)
        node = None
        procs: list = []
        try:
            db = backend.database("large")
            node = start_node(db, work_dir, "large-a", {
                "QIM_AUTH_TIMEOUT_S": "120", "QIM_PER_USER_MSG_RATE": "100000", "QIM_INBOUND_FRAME_RATE": "100000",
            })
            bootstrap(node)
            t = time.monotonic()
            small = populate(node, 10, work_dir / "small.json", group="small", members=10, tier="full")["group"]
            data = populate(node, MEMBERS, work_dir / "large.json", group="large", members=MEMBERS, tier="mention_only")
            populate_s = round(time.monotonic() - t, 1)
            # A database in service has statistics; a freshly loaded one gets them from
            # autovacuum a minute later. Measure the SEND path with them, as operators run it.
            analyze(db)
            names, group = list(data["users"]), data["group"]
            tokens = data["users"]
            senders = [tokens[name] for name in names[:SENDERS]]
            watchers = [(name, tokens[name]) for name in names[SENDERS:SENDERS + online]]

            ctx = _ctx()
            ready, marks, counting, results = ctx.Queue(), ctx.Event(), ctx.Event(), ctx.Queue()
            procs = [ctx.Process(target=observer_process, daemon=True,
                                 args=(node.ws_url, group, watchers[i::OBSERVER_PROCESSES], ready, marks, counting, results))
                     for i in range(OBSERVER_PROCESSES)]
            for proc in procs:
                proc.start()
            for _ in procs:
                _get_while_alive(ready, procs, 300)

            small_rate = closed_loop(node.ws_url, senders, small, phase_s, "s")
            large_rate = closed_loop(node.ws_url, senders, group, phase_s, "l")

            time.sleep(PG_STATS_IDLE_FLUSH_S)
            writes_before = table_writes(db)
            meter = CpuMeter([node.process.pid])
            steady = paced(node.ws_url, senders, group, paced_s, PACED_RATE, "p")
            cpu = meter.read()
            time.sleep(PG_STATS_IDLE_FLUSH_S)
            writes = table_writes(db) - writes_before

            sampled = [name for name, _ in watchers[:sample]]
            paced(node.ws_url, senders, group, 2.0, PACED_RATE, "m", mention_pool=sampled[: max(30, sample // 10)])
            marks.set()
            time.sleep(3)
            counting.set()
            observed = [_get_while_alive(results, procs, 300) for _ in procs]
            counted = recount(db, group, sampled)
        finally:
            for proc in procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
            if node is not None:
                node.stop()
            backend.close()

    steady_ids = set(steady["ids"])
    delays = [ms for part in observed for message_id, ms in part["arrivals"] if message_id in steady_ids]
    expected_arrivals = len(steady_ids) * online
    listed = {name: pair for part in observed for name, pair in part["listed"].items()}
    mismatches = sum(1 for name in sampled if listed.get(name) != counted.get(name))
    rows_per_send = round(writes / steady["sends"], 2)
    ratio = round(large_rate["per_s"] / small_rate["per_s"], 3) if small_rate["per_s"] else None
    send_p99 = round(percentile(steady["latencies"], 99), 1)
    delivery_p99 = round(percentile(delays, 99), 1) if delays else None
    print_table(
        f"Large group ({MEMBERS} members in mention_only, {online} online; PostgreSQL, one node; {SENDERS} senders)",
        ["case", "SEND/s", "ACK p50 ms", "ACK p99 ms", "delivered", "delivery p50 ms", "delivery p99 ms",
         "rows/SEND", "server CPU%"],
        [
            ["10 members, closed loop", small_rate["per_s"], small_rate["p50_ms"], small_rate["p99_ms"], "-", "-", "-", "-", "-"],
            [f"{MEMBERS} members, closed loop", large_rate["per_s"], large_rate["p50_ms"], large_rate["p99_ms"],
             "-", "-", "-", "-", "-"],
            [f"{MEMBERS} members, {PACED_RATE}/s", round(steady["sends"] / paced_s, 1),
             round(percentile(steady["latencies"], 50), 1), send_p99, f"{len(delays)}/{expected_arrivals}",
             round(percentile(delays, 50), 1) if delays else None, delivery_p99, rows_per_send, cpu],
        ],
    )
    print(f"\nunread and mention_count of {len(sampled)} sampled members against a recount from the log: "
          f"{mismatches} mismatches")
    figures = {
        "rows_per_send_100000": rows_per_send, "sends_100000_vs_10": ratio, "send_100000_p99_ms": send_p99,
        "delivery_100000_p99_ms": delivery_p99, "unread_recount_mismatches": mismatches,
    }
    emit({
        "scenario": "large_groups", "quick": args.quick, "members": MEMBERS, "online": online,
        "populate_s": populate_s, "small": small_rate, "large": large_rate, "server_cpu_pct": cpu,
        "delivered": len(delays), "expected_deliveries": expected_arrivals, **figures,
        "ratios": figures,
        "targets": {
            "rows_per_send_100000 <= 10": rows_per_send <= 10,
            "send_100000_p99_ms <= 50": send_p99 <= 50,
            "sends_100000_vs_10 >= 0.5": ratio is not None and ratio >= 0.5,
            "delivery_100000_p99_ms <= 250": delivery_p99 is not None and delivery_p99 <= 250,
            "every online member got every message": len(delays) == expected_arrivals,
            "unread_recount_mismatches == 0": mismatches == 0,
        },
    })


if __name__ == "__main__":
    main()
