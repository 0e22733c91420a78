"""Reaction storm (the C-1 shape): a 100 000-member group (--quick: 10 000) made by
qim_populate, one message, 5 000 REACTs from distinct users (--quick: 1 000) while 1 000 other
members watch online (--quick: 200).

    python bench/reaction_storm.py [--quick] [--backend sqlite|postgres]

Reactors are authenticated before the storm (their connections are what connections.py
measures) and, at the signal, send one REACT each, REACTOR_WINDOW at a time per process, so
REACT/s is the reaction path alone: first REACT sent to last ACK. Observers count the
REACTION_UPDATE frames they get (the merge window, reaction_push_merge_window_s, stays at
its default). DB rows written are counted in the database before and after, as an operator
would; the mailbox, push tasks and badges must not move.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from common import Backend, CpuMeter, bootstrap, emit, percentile, populate, print_table, start_node, work_directory
from loadgen import Target, _ctx, _get_while_alive, open_all, open_member, wait_event
from pyspy import Sampler, print_summary, summarize as summarize_profile

REACTOR_PROCESSES = 2
REACTOR_WINDOW = 100


def observer_process(url: str, tokens: list[str], ready, stop, results) -> None:  # type: ignore[no-untyped-def]
    from common import raise_nofile

    raise_nofile()

    async def main() -> None:
        sockets = await open_all(Target("qim", url), tokens)
        frames = [0] * len(sockets)
        last_counts: list[dict] = [{} for _ in sockets]

        def handler(i: int):  # type: ignore[no-untyped-def]
            def on_text(payload: bytes) -> None:
                if b'"REACTION_UPDATE"' in payload:
                    frames[i] += 1
                    last_counts[i] = json.loads(payload)["counts"]
            return on_text

        for i, ws in enumerate(sockets):
            ws.on_text = handler(i)
        ready.put({"connected": len(sockets)})
        await wait_event(stop)
        results.put({"frames": frames, "last_counts": last_counts})
        for ws in sockets:
            ws.abort()

    asyncio.run(main())


def reactor_process(url: str, tokens: list[str], group: str, seq: int, ready, go, results) -> None:  # type: ignore[no-untyped-def]
    from common import raise_nofile

    raise_nofile()

    async def main() -> None:
        sockets = await open_all(Target("qim", url), tokens)
        answers: list[asyncio.Future] = []
        loop = asyncio.get_running_loop()
        for ws in sockets:
            future = loop.create_future()
            answers.append(future)

            def on_text(payload: bytes, future=future) -> None:  # type: ignore[no-untyped-def]
                if b'"req_id":"r"' in payload and not future.done():
                    future.set_result((time.monotonic(), json.loads(payload)))
            ws.on_text = on_text
        ready.put({"connected": len(sockets)})
        await wait_event(go, 0.005)
        gate = asyncio.Semaphore(REACTOR_WINDOW)
        started_at: list[float] = [0.0] * len(sockets)

        async def react(i: int) -> tuple[float, dict]:
            async with gate:
                started_at[i] = time.monotonic()
                sockets[i].send_text(json.dumps({"type": "REACT", "req_id": "r", "conversation_id": group,
                                                 "conversation_seq": seq, "reaction_key": "+1", "action": "add"}))
                return await asyncio.wait_for(answers[i], 120)

        began = time.monotonic()
        done = await asyncio.gather(*(react(i) for i in range(len(sockets))))
        kinds: dict[str, int] = {}
        for _, frame in done:
            key = "ACK" if frame["type"] == "ACK" else frame.get("code", "?")
            kinds[key] = kinds.get(key, 0) + 1
        results.put({"began": began, "ended": max(t for t, _ in done), "answers": kinds,
                     "ack_ms": [(t - started_at[i]) * 1000 for i, (t, _) in enumerate(done)]})
        for ws in sockets:
            ws.abort()

    asyncio.run(main())


def snapshot(db) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {
        "reaction_details": db.count("reactions_messagereaction"),
        "fingerprints": db.count("reactions_reactionfingerprint"),
        "summaries": db.count("reactions_messagereactionsummary"),
        # int(): PostgreSQL's sum() of a bigint is a numeric (Decimal).
        "summary_version": int(db.query("SELECT coalesce(sum(summary_version), 0) FROM reactions_messagereactionsummary")[0][0]),
        "mailbox": db.count("qim_usermailboxentry"),
        "push_tasks": db.count("qim_pushtask"),
        "badge_sum": int(db.query("SELECT coalesce(sum(badge), 0) FROM qim_userbadgestate")[0][0]),
    }


def send_one_message(url: str, token: str, group: str) -> int:
    async def main() -> int:
        ws = await open_member(Target("qim", url), token)
        ws.send_text(json.dumps({"type": "SEND", "req_id": "s", "conversation_id": group, "client_msg_id": "storm",
                                 "content_type": "text", "payload": {"text": "react to this"}}))
        while True:
            frame = json.loads(await ws.recv(timeout=600))
            if frame.get("req_id") == "s":
                ws.abort()
                if frame["type"] != "ACK":
                    raise RuntimeError(frame)
                return frame["conversation_seq"]

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 000 members, 1 000 reactions, 200 observers")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--profile", type=Path, help="py-spy the server during the storm; raw stacks here")
    args = parser.parse_args()
    profile = None
    members, reactors, observers = (10_000, 1_000, 200) if args.quick else (100_000, 5_000, 1_000)
    timings: dict[str, float] = {}
    with work_directory() as work_dir:
        backend = Backend(args.backend, work_dir)
        node = None
        procs: list = []
        try:
            db = backend.database("storm")
            node = start_node(db, work_dir, "storm-a", {"QIM_AUTH_TIMEOUT_S": "120"})
            bootstrap(node)
            t = time.monotonic()
            data = populate(node, members, work_dir / "storm-tokens.json", group="storm", members=members)
            timings["populate_s"] = round(time.monotonic() - t, 1)
            tokens, group = list(data["users"].values()), data["group"]
            t = time.monotonic()
            seq = send_one_message(node.ws_url, tokens[0], group)
            timings["first_message_s"] = round(time.monotonic() - t, 1)

            ctx = _ctx()
            ready, stop, go, results = ctx.Queue(), ctx.Event(), ctx.Event(), ctx.Queue()
            observer_tokens = tokens[1 + reactors: 1 + reactors + observers]
            reactor_tokens = tokens[1: 1 + reactors]
            procs = [ctx.Process(target=observer_process, args=(node.ws_url, observer_tokens, ready, stop, results), daemon=True)]
            procs += [ctx.Process(target=reactor_process, daemon=True,
                                  args=(node.ws_url, reactor_tokens[i::REACTOR_PROCESSES], group, seq, ready, go, results))
                      for i in range(REACTOR_PROCESSES)]
            t = time.monotonic()
            for proc in procs:
                proc.start()
            for _ in procs:
                answer = _get_while_alive(ready, procs, 600)
                if "error" in answer:
                    raise RuntimeError(answer)
            timings["connect_s"] = round(time.monotonic() - t, 1)
            before = snapshot(db)
            meter = CpuMeter([node.process.pid])
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                sampler = Sampler(node.process.pid, max(2, reactors / 250), args.profile / f"reaction_storm-{args.backend}.txt")
            go.set()
            storms = [_get_while_alive(results, procs, 600) for _ in range(REACTOR_PROCESSES)]
            cpu = meter.read()
            if args.profile and (path := sampler.wait()) is not None:
                profile = summarize_profile(path)
            time.sleep(2 * 2.0 + 1)  # the trailing push of the last merge window (2 s default)
            stop.set()
            watched = _get_while_alive(results, procs, 60)
            after = snapshot(db)
        finally:
            for proc in procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
            if node is not None:
                node.stop()
            backend.close()

    storm_s = max(s["ended"] for s in storms) - min(s["began"] for s in storms)
    answers: dict[str, int] = {}
    for s in storms:
        for k, v in s["answers"].items():
            answers[k] = answers.get(k, 0) + v
    acks = answers.get("ACK", 0)
    ack_ms = [x for s in storms for x in s["ack_ms"]]
    frames = watched["frames"]
    delta = {k: after[k] - before[k] for k in before}
    final_ok = sum(1 for c in watched["last_counts"] if c.get("+1") == acks)
    row = {
        "backend": args.backend, "members": members, "reactors": reactors, "observers": observers,
        "reacts_per_s": round(acks / storm_s, 1), "storm_s": round(storm_s, 2), "acks": acks, "answers": answers,
        "ack_p50_ms": round(percentile(ack_ms, 50), 1), "ack_p99_ms": round(percentile(ack_ms, 99), 1),
        "frames_per_observer_mean": round(sum(frames) / len(frames), 2), "frames_per_observer_max": max(frames),
        "observers_with_final_count": final_ok, "server_cpu_pct": cpu,
        "rows_inserted": delta["reaction_details"] + delta["fingerprints"] + delta["summaries"],
        "summary_updates": delta["summary_version"], "rows_delta": delta, **timings,
    }
    print_table(
        f"Reaction storm ({args.backend}: {members} members, {reactors} distinct reactors pre-connected, "
        f"{REACTOR_WINDOW} REACTs in flight per process, {observers} observers)",
        ["REACT/s", "storm s", "ACK p50 ms", "ACK p99 ms", "UPDATE frames/observer", "max", "rows inserted",
         "summary updates", "mailbox rows", "server CPU%", "populate s", "connect s"],
        [[row["reacts_per_s"], row["storm_s"], row["ack_p50_ms"], row["ack_p99_ms"], row["frames_per_observer_mean"],
          row["frames_per_observer_max"], row["rows_inserted"], row["summary_updates"], delta["mailbox"], cpu,
          row["populate_s"], row["connect_s"]]],
    )
    ratio = round(row["frames_per_observer_mean"] / acks, 5) if acks else None
    if profile:
        print_summary("profile of the server during the storm", profile)
    emit({"scenario": "reaction_storm", "quick": args.quick, "cases": [row], "profile": profile,
          "ratios": {"frames_per_observer_vs_reacts": ratio},
          "targets": {"REACT/s >= 500": row["reacts_per_s"] >= 500,
                      "every observer saw the final count": final_ok == observers,
                      "no mailbox, push task or badge change": delta["mailbox"] == 0 and delta["push_tasks"] == 0
                      and delta["badge_sum"] == 0}})


if __name__ == "__main__":
    main()
