"""Idle connections: 10 000 authenticated connections on one node (--quick: 2 000), resident
memory per connection and the time to connect them all; the tutorial room and raw websockets
holding as many anonymous ones, side by side.

    python bench/connections.py [--quick] [--connections N]

Memory per connection is the server's RSS (psutil) after all are connected and idle, minus its
RSS before (warmed up by a few connections first), over N. Every process raises its
open-file limit to the hard limit; when the hard limit cannot hold N sockets (plus slack) in
the server, N is lowered to what fits and the output says so. Clients are spread over
CLIENT_PROCESSES lean processes.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from typing import Any

import psutil

from common import (
    Backend,
    CpuMeter,
    RawWsServer,
    bootstrap,
    emit,
    populate,
    print_table,
    raise_nofile,
    start_node,
    start_tutorial,
    work_directory,
)
from loadgen import Target, _ctx, _get_while_alive, open_all, wait_event

CLIENT_PROCESSES = 4
FD_SLACK = 200
SETTLE_S = 3.0


def holder_process(target: Target, tokens: list, ready, stop) -> None:  # type: ignore[no-untyped-def]
    raise_nofile()

    async def main() -> None:
        started = time.monotonic()
        try:
            sockets = await open_all(target, tokens, concurrency=50)
        except Exception as exc:
            ready.put({"error": repr(exc)})
            return
        ready.put({"connected": len(sockets), "connect_s": time.monotonic() - started})
        await wait_event(stop, 0.2)
        for ws in sockets:
            ws.abort()

    asyncio.run(main())


def rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def hold(server: str, pid: int, target: Target, tokens: list, processes: int) -> dict[str, Any]:
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
        idle_cpu = CpuMeter([pid])
        time.sleep(1.0)
        idle = idle_cpu.read()
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
        "server_cpu_connecting_pct": cpu, "server_cpu_idle_pct": idle,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 000 connections")
    parser.add_argument("--connections", type=int)
    parser.add_argument("--servers", default="qim,tutorial,raw_websockets")
    args = parser.parse_args()
    wanted = args.connections or (2_000 if args.quick else 10_000)
    limit = raise_nofile()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n = min(wanted, hard - FD_SLACK)
    note = "" if n == wanted else f"open-file hard limit {hard}: {n} connections instead of {wanted}"
    processes = CLIENT_PROCESSES if n > 2_000 else 2
    rows: list[dict[str, Any]] = []
    with work_directory() as work_dir:
        if "qim" in args.servers:
            backend = Backend("sqlite", work_dir)
            node = None
            try:
                node = start_node(backend.database("conns"), work_dir, "conns-a", {"QIM_AUTH_TIMEOUT_S": "120"})
                bootstrap(node)
                tokens = list(populate(node, n, work_dir / "conn-tokens.json")["users"].values())
                rows.append(hold("qim", node.process.pid, Target("qim", node.ws_url), tokens, processes))
            finally:
                if node is not None:
                    node.stop()
                backend.close()
        if "tutorial" in args.servers:
            tutorial = start_tutorial(work_dir, "conns-tutorial")
            try:
                rows.append(hold("tutorial", tutorial.process.pid, Target("tutorial", tutorial.ws_url), [None] * n, processes))
            finally:
                tutorial.stop()
        if "raw_websockets" in args.servers:
            raw = RawWsServer(work_dir).start()
            try:
                rows.append(hold("raw_websockets", raw.process.pid, Target("raw", raw.ws_url), [None] * n, processes))
            finally:
                raw.stop()

    print_table(
        f"Idle connections ({n} per server in {processes} client processes; open-file limit {limit}"
        + (f"; {note}" if note else "") + "; QIM: authenticated, baselines: anonymous)",
        ["server", "connections", "connect s", "conn/s", "RSS before MiB", "RSS after MiB", "KiB/conn",
         "CPU% connecting", "CPU% idle"],
        [[r["server"], r["connections"], r["connect_s"], r["connections_per_s"], r["rss_before_mib"], r["rss_after_mib"],
          r["kib_per_connection"], r["server_cpu_connecting_pct"], r["server_cpu_idle_pct"]] for r in rows],
    )
    by = {r["server"]: r for r in rows}
    qim = by.get("qim", {})
    ratios = {}
    for other in ("tutorial", "raw_websockets"):
        if qim and other in by:
            ratios[f"qim_vs_{other}_kib_per_connection"] = round(qim["kib_per_connection"] / by[other]["kib_per_connection"], 2)
    emit({"scenario": "connections", "quick": args.quick, "wanted": wanted, "connections": n, "nofile_hard": hard,
          "note": note, "cases": rows, "ratios": ratios,
          "targets": {"<= 50 KiB per idle connection": bool(qim and qim["kib_per_connection"] <= 50),
                      "all wanted connections": n == wanted}})


if __name__ == "__main__":
    main()
