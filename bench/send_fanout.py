"""SEND throughput and mailbox rows/s to groups of 10 / 100 / 1 000 / 10 000 members, SQLite
and PostgreSQL, against baselines in the same run: the same rows written by raw SQL (one
transaction per message: the log row plus one mailbox row per member, by `executemany`), and
on PostgreSQL what a SEND batch commits (log rows, mailbox rows, heads, badges) with one COPY
per batch (bench/send_baselines.py), i.e. what the database itself can do without QIM around it.

    python bench/send_fanout.py [--quick] [--backends sqlite,postgres] [--sizes 10,100,1000,10000] [--profile DIR]

The per-user message rate is raised for this run (QIM_PER_USER_MSG_RATE=100000): we measure
the write path, not the limiter. Senders wait for each ACK (closed loop), several users at once,
in a load process of their own (the `websockets` client, compression off: four sockets are no
load). --quick runs 2 s per case instead of 5 s, without SQLite at 10 000 members and the COPY
baseline below 1 000. Where the COPY baseline runs, QIM's case and COPY's alternate in short
slices (bench/send_slices.py), so both see the same moments of a shared machine; the senders'
sockets and the COPY connection are opened once per case and each side warms up unmetered
first, so a slice measures the steady rate. `postgres_cpu_ms_per_send` and
`copy_postgres_cpu_ms_per_message` are PostgreSQL's whole process tree's CPU over each side's
slices per message. --profile samples the server with py-spy during each case (raw stacks in
DIR, a summary in the output). --rounds N sets the slices per side (1: each side once). `ratios.send_vs_copy_1000` is QIM's mailbox rows/s over the COPY
baseline's at 1 000 members on PostgreSQL (issue #22).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from send_baselines import COPY_BATCH, raw_sql_baseline
from send_slices import SliceTotals, alternate, load_process
from pyspy import Sampler, print_summary, summarize as summarize_profile
from common import (
    Backend,
    bootstrap,
    emit,
    mean,
    percentile,
    populate,
    print_table,
    run_in_processes,
    start_node,
    work_directory,
)

SENDERS = 4
# --quick stays under its 2 minutes: SQLite's 10 000-member case (two populations of 10 000
# users and a 2 s SEND at 2 s a message) and the COPY baseline below 1 000 members run only
# in full runs.
QUICK_SQLITE_MAX_SIZE = 1000
QUICK_COPY_MIN_SIZE = 1000
# Where the COPY baseline runs, QIM's case and COPY's alternate in this many rounds of one
# slice each (bench/send_slices.py): 0.5 s slices in --quick, 1 s in full runs.
QUICK_ROUNDS = 4
ROUNDS = 5


# Per load process (bench/send_slices.py keeps one for a whole case): the event loop and the
# sender sockets, connected and AUTHed by the first slice and kept for the later ones.
_SENDERS: dict[tuple[str, tuple[str, ...]], tuple[asyncio.AbstractEventLoop, list[Any]]] = {}
_REQUESTS = itertools.count(1)


def _connected(ws_url: str, tokens: list[str]) -> tuple[asyncio.AbstractEventLoop, list[Any]]:
    """This process's sender sockets for `tokens`, connected and AUTHed once.

    Each slice used to open and AUTH fresh sockets, so every 0.5-1 s slice began on cold
    sockets; the sockets now idle through the COPY slices instead (docs/performance.md,
    "What is measured")."""
    key = (ws_url, tuple(tokens))
    if key not in _SENDERS:
        import websockets

        async def open_one(token: str) -> Any:
            ws = await websockets.connect(ws_url, max_size=None, compression=None)
            await ws.send(json.dumps({"type": "AUTH", "token": token, "device_id": "populated"}))
            assert json.loads(await ws.recv())["type"] == "AUTH_OK"
            return ws

        async def open_all() -> list[Any]:
            return list(await asyncio.gather(*(open_one(t) for t in tokens)))

        loop = asyncio.new_event_loop()
        _SENDERS[key] = (loop, loop.run_until_complete(open_all()))
    return _SENDERS[key]


async def _send_for(ws: Any, index: int, conversation_id: str, seconds: float) -> tuple[list[float], float, float]:
    """SENDs on `ws` back to back, each after the last one's ACK, for `seconds`."""
    latencies = []
    began = time.monotonic()
    deadline = began + seconds
    while time.monotonic() < deadline:
        req = f"{index}-{next(_REQUESTS)}"
        started = time.perf_counter()
        await ws.send(json.dumps({
            "type": "SEND", "req_id": req, "conversation_id": conversation_id,
            "client_msg_id": f"bench-{time.time_ns()}-{req}", "content_type": "text",
            "payload": {"text": "x" * 64},
        }))
        while True:  # skip EVENT pushes of our own group
            frame = json.loads(await ws.recv())
            if frame.get("req_id") == req:
                break
        if frame["type"] != "ACK":
            raise RuntimeError(frame)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies, began, time.monotonic()


def sender_process(ws_url: str, tokens: list[str], conversation_id: str, seconds: float) -> dict[str, Any]:
    """One load process: each token sends text SENDs back to back for `seconds`, on sockets
    kept from one slice to the next (`_connected`)."""
    loop, sockets = _connected(ws_url, tokens)

    async def send_all() -> list[tuple[list[float], float, float]]:
        return list(await asyncio.gather(*(_send_for(ws, i, conversation_id, seconds) for i, ws in enumerate(sockets))))

    per_sender = loop.run_until_complete(send_all())
    # From the first sender's first SEND to the last ACK: connecting is not sending.
    elapsed = max(end for _, _, end in per_sender) - min(began for _, began, _ in per_sender)
    flat = [x for lat, _, _ in per_sender for x in lat]
    return {"acks": len(flat), "elapsed": elapsed, "latencies": flat}


def pg_url(db) -> str:  # type: ignore[no-untyped-def]
    return db.pg.url(db.dbname)


PROFILES: dict[str, dict] = {}
STARTED = time.monotonic()


def database_root(backend: Backend) -> int | None:
    """PostgreSQL's postmaster: its process tree's CPU is the database's share, backends and
    workers started during a slice included (bench/send_slices.py TreeCpu)."""
    if backend.pg is None:
        return None
    return int((backend.pg.datadir / "postmaster.pid").read_text().split()[0])


def settle(db) -> None:  # type: ignore[no-untyped-def]
    """Start each case from a quiet database: the previous case's dead rows vacuumed and its
    dirty pages written, so no case pays for the one before (autovacuum and checkpoints of the
    10- and 100-member cases used to land in the 1 000-member one)."""
    if db.pg is None:
        db.query("PRAGMA wal_checkpoint(TRUNCATE)")
        return
    db.pg.psql("VACUUM ANALYZE", dbname=db.dbname)
    db.pg.psql("CHECKPOINT")


def drop(db) -> None:  # type: ignore[no-untyped-def]
    """A baseline's throwaway database, gone before the next case (nothing left to vacuum)."""
    if db.pg is None:
        Path(db.url.removeprefix("sqlite:///")).unlink(missing_ok=True)
        return
    db.pg.psql(f"DROP DATABASE {db.dbname}")


def _delta(after: dict[str, int], before: dict[str, int], name: str) -> int:
    return after.get(name, 0) - before.get(name, 0)


def make_groups(node, sizes: list[int], work_dir: Path) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """A group of the first N populated users per size. Groups of 1 000 and more by
    `qim_populate` (users u000001.. are kept, so each call adds only the missing ones); the
    smaller ones by u000001 through the REST API, which saves a manage.py start each."""
    groups: dict[int, str] = {}
    for size in sorted((s for s in sizes if s >= 1000), reverse=True) or [max(sizes)]:
        # The `full` tier: this measures write diffusion (bench/large_groups.py the other tier).
        groups[size] = populate(
            node, size, work_dir / f"tokens-{size}.json", group=f"g{size}", members=size, tier="full"
        )["group"]
    users = list(json.loads((work_dir / f"tokens-{max(sizes)}.json").read_text())["users"].items())
    for size in sizes:
        if size not in groups:
            answer = httpx.post(
                f"{node.http_url}/api/v1/conversations", headers={"Authorization": f"Token {users[0][1]}"}, timeout=60,
                json={"kind": "group", "title": f"g{size}", "member_user_ids": [u for u, _ in users[1:size]]},
            )
            answer.raise_for_status()
            groups[size] = answer.json()["conversation_id"]
    return groups


def copy_database(backend: Backend, kind: str, size: int, quick: bool):  # type: ignore[no-untyped-def]
    """The COPY baseline's throwaway database (send_baselines), or None where it does not run:
    PostgreSQL only, and in --quick only from QUICK_COPY_MIN_SIZE members."""
    if kind != "postgres" or (quick and size < QUICK_COPY_MIN_SIZE):
        return None
    db = backend.database(f"copy_{size}")
    settle(db)
    return db


def copy_columns(copied: dict[str, Any] | None, sends: float, size: int) -> dict[str, Any]:
    """The COPY baseline's figures beside QIM's: mailbox rows/s, and QIM's rows/s over it."""
    if copied is None:
        return {"copy_sends_per_s": None, "copy_rows_per_s": None, "qim_vs_copy": None}
    copy_sends = copied["messages"] / copied["elapsed"]
    return {
        "copy_sends_per_s": round(copy_sends, 1), "copy_rows_per_s": round(copy_sends * size),
        "qim_vs_copy": round(sends / copy_sends, 3) if copy_sends else None,
    }


def run_case(backend: Backend, db, node, admin_token: str, size: int, group: str, sender_tokens: list[str],  # type: ignore[no-untyped-def]
             seconds: float, profile_dir: Path | None, quick: bool, rounds: int) -> dict[str, Any]:
    """One group size: QIM's SENDs alternated with the COPY baseline (send_slices), then the
    raw-SQL baseline; answers the case's row of the table."""
    kind = backend.kind
    settle(db)
    counters_before = node.stats(admin_token)["counters"]
    copy_db = copy_database(backend, kind, size, quick)
    sampler = None
    if profile_dir is not None:
        span = seconds * (2 if copy_db is not None else 1) + rounds * 2
        sampler = Sampler(node.process.pid, span, profile_dir / f"send_fanout-{kind}-{size}.txt")

    with load_process() as senders:
        def send(piece: float) -> dict[str, Any]:
            return senders.apply(sender_process, (node.ws_url, sender_tokens, group, piece))

        totals, copied = alternate(send, copy_db and pg_url(copy_db), size, seconds, rounds,
                                   [node.process.pid], database_root(backend))
    if copy_db is not None:
        drop(copy_db)
    if sampler is not None and (path := sampler.wait()) is not None:
        PROFILES[f"{kind}-{size}"] = summarize_profile(path)
    batches = _delta(node.stats(admin_token)["counters"], counters_before, "send_batches")
    baseline_db = backend.database(f"baseline_{kind}_{size}")
    settle(baseline_db)
    raw = run_in_processes(raw_sql_baseline, [(kind, baseline_db.url if kind == "sqlite" else pg_url(baseline_db),
                                               size, seconds)])[0]
    drop(baseline_db)
    return case_row(kind, size, totals, batches, raw, copied)


def case_row(kind: str, size: int, totals: SliceTotals, batches: int, raw: dict[str, Any],
             copied: dict[str, Any] | None) -> dict[str, Any]:
    out = totals.out()
    sends = out["acks"] / out["elapsed"]
    raw_sends = raw["messages"] / raw["elapsed"]
    server_cpu, db_cpu = totals.cpu_pct()
    copy_db_ms = None
    if copied is not None and copied.get("db_cpu_s") is not None and copied["messages"]:
        copy_db_ms = round(1000 * copied["db_cpu_s"] / copied["messages"], 2)
    return {
        "backend": kind, "members": size, "senders": SENDERS,
        "sends_per_s": round(sends, 1), "mailbox_rows_per_s": round(sends * size),
        "ack_p50_ms": round(percentile(out["latencies"], 50), 1),
        "ack_p99_ms": round(percentile(out["latencies"], 99), 1),
        "ack_mean_ms": round(mean(out["latencies"]), 1),
        "sends_per_transaction": round(out["acks"] / batches, 2) if batches else None,
        "server_cpu_pct": server_cpu, "postgres_cpu_pct": db_cpu if kind == "postgres" else None,
        "server_cpu_ms_per_send": round(10 * server_cpu * totals.wall / out["acks"], 2) if out["acks"] else None,
        "postgres_cpu_ms_per_send": totals.db_cpu_ms_per_send() if kind == "postgres" else None,
        "copy_postgres_cpu_ms_per_message": copy_db_ms,
        "raw_sql_sends_per_s": round(raw_sends, 1),
        "raw_sql_rows_per_s": round(raw_sends * size),
        "qim_vs_raw_sql": round(sends / raw_sends, 3) if raw_sends else None,
        **copy_columns(copied, sends, size),
    }


def run_backend(kind: str, sizes: list[int], seconds: float, work_dir: Path, profile_dir: Path | None = None,
                quick: bool = False, rounds: int = ROUNDS) -> list[dict[str, Any]]:
    backend = Backend(kind, work_dir)
    results = []
    try:
        db = backend.database(f"fanout_{kind}")
        node = start_node(db, work_dir, f"bench-{kind}", {"QIM_PER_USER_MSG_RATE": "100000"})
        try:
            admin_token = bootstrap(node)
            groups = make_groups(node, sizes, work_dir)
            tokens = json.loads((work_dir / f"tokens-{max(sizes)}.json").read_text())
            sender_tokens = list(tokens["users"].values())[:SENDERS]
            for size in sizes:
                print(f"send_fanout: {kind} {size} members at {time.monotonic() - STARTED:.0f} s", file=sys.stderr)
                results.append(run_case(backend, db, node, admin_token, size, groups[size], sender_tokens, seconds,
                                        profile_dir, quick, rounds))
        finally:
            node.stop()
    finally:
        backend.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per case instead of 5 s")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--profile", type=Path, help="py-spy the server during each case; raw stacks here")
    parser.add_argument("--rounds", type=int, help="QIM/COPY rounds per case (default 4 in --quick, 5 full; "
                        "1 runs each side once, QIM first)")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    seconds = 2.0 if args.quick else 5.0
    sizes = [int(s) for s in args.sizes.split(",")]
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    rows: list[dict[str, Any]] = []
    with work_directory() as work_dir:
        for kind in args.backends.split(","):
            kind_sizes = [s for s in sizes if not (args.quick and kind == "sqlite" and s > QUICK_SQLITE_MAX_SIZE)]
            rows += run_backend(kind, kind_sizes, seconds, work_dir, args.profile, args.quick, rounds)
    print_table(
        f"SEND fan-out ({SENDERS} closed-loop senders, {seconds:g} s per case, 64-byte text; "
        f"COPY: {COPY_BATCH} messages per transaction)",
        ["backend", "members", "SEND/s", "mailbox rows/s", "SENDs/txn", "p50 ms", "p99 ms", "server CPU%",
         "PostgreSQL CPU%", "PG CPU ms/SEND", "COPY PG CPU ms/msg", "raw SQL msg/s", "QIM/raw", "COPY rows/s", "QIM/COPY"],
        [[r["backend"], r["members"], r["sends_per_s"], r["mailbox_rows_per_s"], r["sends_per_transaction"],
          r["ack_p50_ms"], r["ack_p99_ms"],
          r["server_cpu_pct"], r["postgres_cpu_pct"] if r["postgres_cpu_pct"] is not None else "-",
          r["postgres_cpu_ms_per_send"] or "-", r["copy_postgres_cpu_ms_per_message"] or "-",
          r["raw_sql_sends_per_s"], r["qim_vs_raw_sql"], r["copy_rows_per_s"] or "-", r["qim_vs_copy"] or "-"]
         for r in rows],
    )
    ratios = {f"{r['backend']}_{r['members']}_qim_vs_raw_sql": r["qim_vs_raw_sql"] for r in rows}
    ratios.update({f"postgres_{r['members']}_qim_vs_copy": r["qim_vs_copy"] for r in rows if r["qim_vs_copy"]})
    pg_1000 = next((r for r in rows if r["backend"] == "postgres" and r["members"] == 1000), None)
    targets = {"postgres_1000_sends_per_s >= 50": bool(pg_1000 and pg_1000["sends_per_s"] >= 50)}
    if pg_1000 is not None:
        ratios["send_vs_copy_1000"] = pg_1000["qim_vs_copy"]
        targets["send_vs_copy_1000 >= 0.5"] = bool(pg_1000["qim_vs_copy"] and pg_1000["qim_vs_copy"] >= 0.5)
    for tag, summary in PROFILES.items():
        print_summary(f"profile {tag}", summary)
    emit({"scenario": "send_fanout", "quick": args.quick, "seconds_per_case": seconds, "rounds": rounds, "cases": rows, "profiles": PROFILES,
          "ratios": ratios, "targets": targets})


if __name__ == "__main__":
    main()
