"""Idle connections (issue #22 item 1): 18 000 authenticated connections on one node
(--quick: 2 000), each in one room of ROOM_MEMBERS and subscribed to the presence of five
users; resident memory per connection, the node's CPU while they idle, and the time to connect
them all; raw websockets (and the tutorial room, capped at TUTORIAL_MAX) holding anonymous ones
side by side.

    python bench/connections.py [--quick] [--connections N] [--asgi-server daphne|uvicorn]

Memory per connection is the server's RSS (psutil) after all are connected and idle, minus its
RSS before (warmed up by a few connections first), over N. Idle CPU is the server's CPU over
IDLE_S seconds after SETTLE_S (percent of one core; BASELINE_IDLE_S for the baselines). Every process raises its open-file limit
to the hard limit; when the hard limit cannot hold N sockets (plus slack) in the server, N is
lowered to what fits and the output says so. Clients are spread over lean processes.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from pathlib import Path
from typing import Any

import psutil

from common import (
    Backend,
    CpuMeter,
    RawWsServer,
    bootstrap,
    emit,
    node_stats,
    populate,
    print_table,
    raise_nofile,
    rss,
    start_node,
    start_tutorial,
    work_directory,
)
from idle_members import ROOM_MEMBERS, WATCHED_PER_CONNECTION, create_rooms, open_all_idle, plan
from pyspy import Sampler, print_summary, summarize as summarize_profile
from loadgen import Target, _ctx, _get_while_alive, open_all, wait_event

CLIENT_PROCESSES = 4
# The server's own descriptors beside its sockets (database, listening socket, logs, epoll):
# 18 000 sockets fit under the hard limit of 20 000.
FD_SLACK = 200
SETTLE_S = 3.0
# QIM's idle window: longer than the keepalive interval (25 s) and the token re-check period
# (30 s), so each periodic cost is in it at its steady rate, not caught or missed by chance
# (issue 22: 10 s saw either none or all of a 30 s burst). The baselines run no periodic work.
IDLE_S = 30.0
BASELINE_IDLE_S = 10.0
# The tutorial connects about 90/s (its in-memory layer's group_add cleanup is O(n)): capped.
TUTORIAL_MAX = 2_000


def holder_process(target: Target, tokens: list, ready, stop) -> None:  # type: ignore[no-untyped-def]
    """Hold a connection per token (QIM: a (spec, token) pair, see idle_members.plan)."""
    raise_nofile()

    async def main() -> None:
        started = time.monotonic()
        try:
            if target.kind == "qim":
                sockets = await open_all_idle(target, tokens)
            else:
                sockets = await open_all(target, tokens, concurrency=50)
        except Exception as exc:
            ready.put({"error": repr(exc)})
            return
        ready.put({"connected": len(sockets), "connect_s": time.monotonic() - started})
        await wait_event(stop, 0.2)
        for ws in sockets:
            ws.abort()

    asyncio.run(main())


PROFILE: dict[str, Any] = {"dir": None, "summaries": {}}


def hold(server: str, pid: int, target: Target, tokens: list, processes: int,
         idle_s: float = BASELINE_IDLE_S) -> dict[str, Any]:
    """Warm up with a few connections, then connect all `tokens` and measure."""
    ctx = _ctx()
    warm_ready, warm_stop = ctx.Queue(), ctx.Event()
    warm = ctx.Process(target=holder_process, args=(target, tokens[:20], warm_ready, warm_stop), daemon=True)
    warm.start()
    _get_while_alive(warm_ready, [warm], 120)
    warm_stop.set()
    warm.join(timeout=10)
    time.sleep(1.5)
    before = rss(pid)
    ready, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=holder_process, args=(target, tokens[i::processes], ready, stop), daemon=True)
             for i in range(processes)]
    try:
        meter = CpuMeter([pid])
        started = time.monotonic()
        for proc in procs:
            proc.start()
        answers = [_get_while_alive(ready, procs, 600) for _ in procs]
        connect_s = time.monotonic() - started
        cpu = meter.read()
        errors = [a["error"] for a in answers if "error" in a]
        if errors:
            raise RuntimeError(f"{server}: {errors[0]}")
        time.sleep(SETTLE_S)
        after = rss(pid)
        sampler = Sampler(pid, idle_s, PROFILE["dir"] / f"connections-{server}.txt") if PROFILE["dir"] else None
        idle_cpu = CpuMeter([pid])
        time.sleep(idle_s)
        idle = idle_cpu.read()
        held = established(pid, target.host_port_path[1])
        if sampler is not None and (path := sampler.wait()) is not None:
            PROFILE["summaries"][server] = summarize_profile(path)
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=20)
            if proc.is_alive():
                proc.kill()
    n = sum(a["connected"] for a in answers)
    return {
        "server": server, "connections": n, "connect_s": round(connect_s, 1),
        "connections_per_s": round(n / connect_s), "rss_before_mib": round(before / 2**20, 1),
        "rss_after_mib": round(after / 2**20, 1), "kib_per_connection": round((after - before) / n / 1024, 1),
        "server_cpu_connecting_pct": cpu, "server_cpu_idle_pct": idle, "held_after_idle": held,
    }


def established(pid: int, port: int) -> int:
    """The server's established sockets on its listening port: whether the idle window lost
    any (a keepalive that aborts live sockets lowers this, not the CPU figure)."""
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port)


def run_qim(work_dir, n: int, processes: int, asgi_server: str, node_env: dict[str, str]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Users, rooms of ROOM_MEMBERS, then N connections, each AUTH + ROOM_JOIN + PRESENCE_SUB."""
    backend = Backend("sqlite", work_dir)
    node = None
    try:
        node = start_node(backend.database("conns"), work_dir, "conns-a", {"QIM_AUTH_TIMEOUT_S": "120", **node_env},
                          asgi_server=asgi_server)
        admin = bootstrap(node)
        users = populate(node, n, work_dir / "conn-tokens.json")["users"]
        specs = plan(sorted(users))
        create_rooms(node.http_url, admin, -(-n // ROOM_MEMBERS))
        members = [(spec, users[spec[0]]) for spec in specs]
        name = "qim" if asgi_server == "daphne" else f"qim_{asgi_server}"
        row = hold(name, node.process.pid, Target("qim", node.ws_url), members, processes, IDLE_S)
        # Which keepalive the node gave the sockets (QIM_WS_KEEPALIVE=auto: the kernel's for
        # direct ones, docs/performance.md,
        # "Idle cost: the timing wheel and the kernel's TCP keepalive").
        # A long timeout: the node is still taking the 18 000 closes of `hold`'s end.
        counters = node_stats(node, admin, timeout=300)["counters"]
        row["keepalive"] = {"by_kernel": counters.get("keepalive_by_kernel", 0),
                            "by_frames": counters.get("keepalive_by_frames", 0)}
        return row
    finally:
        if node is not None:
            node.stop()
        backend.close()


def run_baselines(work_dir, servers: str, n: int, processes: int) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    rows = []
    if "tutorial" in servers:
        tutorial = start_tutorial(work_dir, "conns-tutorial")
        try:
            count = min(n, TUTORIAL_MAX)
            rows.append(hold("tutorial", tutorial.process.pid, Target("tutorial", tutorial.ws_url), [None] * count,
                             min(processes, 2)))
        finally:
            tutorial.stop()
    if "raw_websockets" in servers:
        raw = RawWsServer(work_dir).start()
        try:
            rows.append(hold("raw_websockets", raw.process.pid, Target("raw", raw.ws_url), [None] * n, processes))
        finally:
            raw.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 000 connections")
    parser.add_argument("--connections", type=int)
    parser.add_argument("--servers", default="qim,tutorial,raw_websockets")
    parser.add_argument("--asgi-server", default="daphne", choices=["daphne", "uvicorn"],
                        help="what serves QIM (daphne is the supported server)")
    parser.add_argument("--node-env", action="append", default=[], help="NAME=VALUE for the QIM node")
    parser.add_argument("--profile", type=Path, help="py-spy each server while idle; raw stacks here")
    parser.add_argument("--idle-s", type=float, default=IDLE_S,
                        help="QIM's idle window (longer to watch several keepalive intervals)")
    args = parser.parse_args()
    globals()["IDLE_S"] = args.idle_s
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE["dir"] = args.profile
    wanted = args.connections or (2_000 if args.quick else 18_000)
    limit = raise_nofile()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n = min(wanted, hard - FD_SLACK)
    note = "" if n == wanted else f"open-file hard limit {hard}: {n} connections instead of {wanted}"
    processes = CLIENT_PROCESSES if n > 2_000 else 2
    rows: list[dict[str, Any]] = []
    with work_directory() as work_dir:
        if "qim" in args.servers:
            rows.append(run_qim(work_dir, n, processes, args.asgi_server, dict(e.split("=", 1) for e in args.node_env)))
        rows += run_baselines(work_dir, args.servers, n, processes)
    report(args, rows, n, wanted, hard, limit, processes, note)


def report(args, rows: list[dict[str, Any]], n: int, wanted: int, hard: int, limit: int, processes: int,  # type: ignore[no-untyped-def]
           note: str) -> None:
    print_table(
        f"Idle connections ({n} per server in {processes} client processes, the tutorial at most {TUTORIAL_MAX}; "
        f"open-file limit {limit}" + (f"; {note}" if note else "")
        + f"; QIM: authenticated, in a room of {ROOM_MEMBERS}, watching {WATCHED_PER_CONNECTION} users; "
        f"baselines: anonymous; idle CPU over {IDLE_S:g} s, baselines {BASELINE_IDLE_S:g} s)",
        ["server", "connections", "connect s", "conn/s", "RSS before MiB", "RSS after MiB", "KiB/conn",
         "CPU% connecting", "CPU% idle", "held after idle"],
        [[r["server"], r["connections"], r["connect_s"], r["connections_per_s"], r["rss_before_mib"], r["rss_after_mib"],
          r["kib_per_connection"], r["server_cpu_connecting_pct"], r["server_cpu_idle_pct"], r["held_after_idle"]]
         for r in rows],
    )
    for row in rows:
        if "keepalive" in row:
            print(f"{row['server']} keepalive: {row['keepalive']['by_kernel']} sockets by the kernel's TCP keepalive, "
                  f"{row['keepalive']['by_frames']} by Pong frames")
    for server, summary in PROFILE["summaries"].items():
        print_summary(f"profile of {server} while idle", summary)
    by = {r["server"]: r for r in rows}
    qim = next((r for r in rows if r["server"].startswith("qim")), {})
    ratios: dict[str, float] = {}
    for other in ("tutorial", "raw_websockets"):
        if qim and other in by:
            ratios[f"qim_vs_{other}_kib_per_connection"] = round(qim["kib_per_connection"] / by[other]["kib_per_connection"], 2)
    if qim:
        ratios["idle_cpu_pct"] = qim["server_cpu_idle_pct"]
    kib_ratio = ratios.get("qim_vs_raw_websockets_kib_per_connection")
    emit({"scenario": "connections", "quick": args.quick, "wanted": wanted, "connections": n, "nofile_hard": hard,
          "asgi_server": args.asgi_server, "idle_s": IDLE_S, "baseline_idle_s": BASELINE_IDLE_S, "room_members": ROOM_MEMBERS,
          "watched_per_connection": WATCHED_PER_CONNECTION, "note": note, "cases": rows, "ratios": ratios,
          "idle_cpu_pct": ratios.get("idle_cpu_pct"),
          "targets": {"qim_vs_raw_websockets_kib_per_connection <= 1.5": kib_ratio is not None and kib_ratio <= 1.5,
                      "idle_cpu_pct <= 1": bool(qim) and qim["server_cpu_idle_pct"] <= 1,
                      "all wanted connections": n == wanted,
                      "every qim connection held while idle": bool(qim) and qim["held_after_idle"] == qim["connections"]}})


if __name__ == "__main__":
    main()
