"""Where an idle connection's memory goes, inside the node: a tracemalloc snapshot diff and a
live-object census (bench/memhook.py) around N idle members of bench/connections.py.

    python bench/memprobe.py [--connections 1000] [--frames 8] [--top 25] [--asgi-server daphne]

Prints KiB per connection by file:line, by traceback (the biggest groups), the live objects
added per connection by type, and RSS against Python-traced bytes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import tracemalloc
from pathlib import Path

from common import Backend, bootstrap, populate, raise_nofile, start_node, work_directory
from connections import rss
from idle_members import ROOM_MEMBERS, create_rooms, plan
from loadgen import Target, _ctx, _get_while_alive


def snapshot(pid: int, out: str, n: int) -> tuple[tracemalloc.Snapshot, dict[str, int]]:
    os.kill(pid, signal.SIGUSR2)
    done = Path(f"{out}-{n}.done")
    deadline = time.monotonic() + 300
    while not done.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no snapshot")
        time.sleep(0.2)
    snap = tracemalloc.Snapshot.load(f"{out}-{n}.snap")
    print(Path(f"{out}-{n}.holders.txt").read_text(), end="")
    return snap, json.loads(Path(f"{out}-{n}.types.json").read_text())


def report(before, after, types_before, types_after, n: int, top: int) -> None:  # type: ignore[no-untyped-def]
    flt = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(flt), after.filter_traces(flt)
    total = sum(s.size_diff for s in after.compare_to(before, "filename"))
    print(f"\ntraced: {total / n / 1024:.2f} KiB per connection")
    print("\nby file:line (bytes per connection)")
    for stat in after.compare_to(before, "lineno")[:top]:
        frame = stat.traceback[0]
        print(f"{stat.size_diff / n:9.0f}  {stat.count_diff / n:6.2f} blocks  {frame.filename}:{frame.lineno}")
    print("\nby traceback (bytes per connection, innermost last)")
    for stat in after.compare_to(before, "traceback")[: top // 2]:
        print(f"{stat.size_diff / n:9.0f}")
        for frame in list(stat.traceback)[-6:]:
            print(f"           {frame.filename.split('site-packages/')[-1]}:{frame.lineno}")
    print("\nlive objects added per connection, by type")
    grown = {t: types_after.get(t, 0) - types_before.get(t, 0) for t in types_after}
    for name, count in sorted(grown.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{count / n:7.2f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--asgi-server", default="daphne")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the node")
    args = parser.parse_args()
    raise_nofile()
    from connections import holder_process

    n = args.connections
    with work_directory() as work_dir:
        out = str(work_dir / "mem")
        backend = Backend("sqlite", work_dir)
        env = {"QIM_AUTH_TIMEOUT_S": "120", "QIM_BENCH_TRACEMALLOC": str(args.frames),
               "QIM_BENCH_TRACEMALLOC_OUT": out, **dict(e.split("=", 1) for e in args.env)}
        node = start_node(backend.database("mem"), work_dir, "mem-a", env, asgi_server=args.asgi_server)
        try:
            admin = bootstrap(node)
            users = populate(node, n + 20, work_dir / "tokens.json")["users"]
            create_rooms(node.http_url, admin, -(-(n + 20) // ROOM_MEMBERS))
            members = [(spec, users[spec[0]]) for spec in plan(sorted(users))]
            target = Target("qim", node.ws_url)
            ctx = _ctx()
            ready, stop = ctx.Queue(), ctx.Event()
            warm = ctx.Process(target=holder_process, args=(target, members[-20:], ready, stop), daemon=True)
            warm.start()
            _get_while_alive(ready, [warm], 120)
            time.sleep(2)
            rss_before = rss(node.process.pid)
            before, types_before = snapshot(node.process.pid, out, 1)
            procs = [ctx.Process(target=holder_process, args=(target, members[i:n:2], ready, stop), daemon=True)
                     for i in range(2)]
            for proc in procs:
                proc.start()
            answers = [_get_while_alive(ready, procs, 600) for _ in procs]
            if errors := [a["error"] for a in answers if "error" in a]:
                raise RuntimeError(f"a holder failed: {errors[0]}")
            n = sum(a["connected"] for a in answers)
            time.sleep(3)
            rss_after = rss(node.process.pid)
            after, types_after = snapshot(node.process.pid, out, 2)
            stop.set()
            print(f"{n} connections. RSS: {(rss_after - rss_before) / n / 1024:.2f} KiB per connection "
                  f"(tracemalloc's own bookkeeping included: compare traced bytes)")
            report(before, after, types_before, types_after, n, args.top)
            for proc in [warm, *procs]:
                proc.join(timeout=20)
        finally:
            node.stop()
            backend.close()


if __name__ == "__main__":
    main()
