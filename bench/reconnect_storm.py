"""Reconnect storm (issue #22 item 2): 10 000 clients (--quick: 2 000), each a user with a
device token, a mailbox position and a joined room of ROOM_SIZE members, drop at once and come
back at once; raw websockets taking as many anonymous connects at once, side by side.

    python bench/reconnect_storm.py [--quick] [--clients N] [--asgi-servers daphne,uvicorn]
                                    [--backend sqlite|postgres] [--profile DIR]

Each client connects, AUTHs, SYNCs to the head and ROOM_JOINs its room. Then every socket is
aborted at once (the node keeps running: one sender per room stays joined, so the room rings
survive), and while they are away each room's sender writes MISSED messages to its group
(MISSED mailbox events per member) and MISSED to its room. Then all reconnect at once: AUTH,
then SYNC from the mailbox position and ROOM_JOIN with replay from the last room_seq, sent
together. A client is caught up when both answers are in, and must have got exactly the events
it missed. Reconnects per second = clients / (first reconnect attempt to last caught-up).
The baseline opens as many sockets to bench/baselines/raw_ws.py from the same client processes
with the same concurrency, the same way (a cold connect, a drop, then the measured storm).
"""

from __future__ import annotations

import argparse
import time
from array import array
from pathlib import Path
from typing import Any

import httpx

from common import (
    Backend, CpuMeter, RawWsServer, bootstrap, emit, node_stats, percentile, populate, print_table, raise_nofile,
    rss, start_node, uvicorn_available, work_directory,
)
from loadgen import _ctx, _get_while_alive
from storm_clients import Client, client_process, sender_process

ROOM_SIZE = 100
MISSED = 3  # mailbox events and room events each client misses while away
CONCURRENCY = 250  # connects in flight per client process


class Storm:
    """Client processes holding `clients`, driven phase by phase (client_process)."""

    def __init__(self, url: str, clients: list[Client], processes: int, args: argparse.Namespace) -> None:
        ctx = _ctx()
        self.ready = ctx.Queue()
        self.drop, self.storm, self.stop = ctx.Event(), ctx.Event(), ctx.Event()
        params = {"concurrency": args.concurrency, "timeout_s": 120.0, "pipeline": not args.sequential}
        self.procs = [ctx.Process(target=client_process, daemon=True,
                                  args=(url, clients[i::processes], params, self.ready, self.drop, self.storm, self.stop))
                      for i in range(processes)]
        for proc in self.procs:
            proc.start()

    def phase(self, timeout: float = 600) -> list[dict[str, Any]]:
        return [_get_while_alive(self.ready, self.procs, timeout) for _ in self.procs]

    def close(self) -> None:
        self.stop.set()
        for proc in self.procs:
            proc.join(timeout=20)
            if proc.is_alive():
                proc.kill()


def _ms(value: float) -> int | None:
    """A rounded figure; None when no client finished (NaN)."""
    return None if value != value else round(value)


def summary(server: str, parts: list[dict[str, Any]], expected: int) -> dict[str, Any]:
    """One phase's figures over every client process."""
    took, mailbox, room = array("f"), array("i"), array("i")
    opened, authed = array("f"), array("f")
    for part in parts:
        took.frombytes(part["took"])
        opened.frombytes(part["opened"])
        authed.frombytes(part["authed"])
        mailbox.frombytes(part["mailbox"])
        room.frombytes(part["room"])
    failed = sum(p["failed"] for p in parts)
    seconds = max(p["last"] for p in parts) - min(p["first"] for p in parts)
    ms = [t * 1000 for t in took]
    missed = sum(max(0, expected - n) for n in mailbox) + sum(max(0, expected - n) for n in room)
    return {
        "server": server, "clients": len(took), "failed": failed, "seconds": round(seconds, 2),
        "per_s": round(len(took) / seconds) if seconds else None,
        "p50_ms": _ms(percentile(ms, 50)), "p99_ms": _ms(percentile(ms, 99)), "max_ms": round(max(ms, default=0)),
        "open_p50_ms": _ms(percentile(list(opened), 50) * 1000),
        "auth_ok_p50_ms": _ms(percentile(list(authed), 50) * 1000) if expected else None,
        "mailbox_events": sum(mailbox), "room_events": sum(room), "missed": missed + failed * 2 * expected,
        "extra": sum(max(0, n - expected) for n in mailbox) + sum(max(0, n - expected) for n in room),
        "failures": [f for p in parts for f in p["failures"]][:3],
    }


def cpu_figures(meter: CpuMeter, clients: CpuMeter, began: float, n: int) -> dict[str, float]:
    """The server's CPU% over the storm and its CPU milliseconds per client: on a shared
    machine the second moves far less than the rates (the server may wait for a CPU). The
    client processes' CPU per client beside it: they share the two cores with the server."""
    pct, client_pct, seconds = meter.read(), clients.read(), time.monotonic() - began
    return {"server_cpu_pct": pct, "server_cpu_ms_per_client": round(pct / 100 * seconds * 1000 / n, 2),
            "client_cpu_ms_per_client": round(client_pct / 100 * seconds * 1000 / n, 2)}


def set_up_rooms(node: Any, tokens: dict[str, str], n: int) -> list[tuple[str, str, str]]:
    """One group and one room per ROOM_SIZE clients, each with its sender (a user past the
    first n): answers (sender token, conversation_id, room_id) per room."""
    users = list(tokens)
    senders = []
    with httpx.Client(base_url=f"{node.http_url}/api/v1", timeout=60) as http:
        for g in range(n // ROOM_SIZE):
            sender = users[n + g]
            headers = {"Authorization": f"Token {tokens[sender]}"}
            members = users[g * ROOM_SIZE:(g + 1) * ROOM_SIZE]
            made = http.post("/conversations", headers=headers, json={"kind": "group", "title": f"storm {g}",
                                                                       "member_user_ids": members})
            made.raise_for_status()
            room_id = f"storm-{g}"
            http.post("/rooms", headers=headers, json={"room_id": room_id}).raise_for_status()
            senders.append((tokens[sender], made.json()["conversation_id"], room_id))
    return senders


def wait_connections(node: Any, admin: str, count: int, timeout: float = 120) -> None:
    """Until the node holds `count` connections (the drop is seen)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = node_stats(node, admin)
        if stats["connections"] <= count:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the node still holds {stats['connections']} connections, not {count}")


def send_round(commands, answers, sender_proc, count: int, rooms: int) -> None:  # type: ignore[no-untyped-def]
    commands.put(("send", count))
    tally = _get_while_alive(answers, [sender_proc], 300)
    if tally["acks"] != 2 * count * rooms:
        raise RuntimeError(f"the senders were not all acknowledged: {tally}")


def run_qim(args: argparse.Namespace, n: int, work_dir: Path, asgi_server: str, processes: int) -> dict[str, Any]:
    from pyspy import Sampler, summarize

    backend = Backend(args.backend, work_dir)
    node = start_node(backend.database(f"storm-{asgi_server}"), work_dir, f"storm-{asgi_server}",
                      {"QIM_AUTH_TIMEOUT_S": "120"}, asgi_server=asgi_server)
    storm = sender_proc = None
    try:
        admin = bootstrap(node)
        tokens = populate(node, n + n // ROOM_SIZE, work_dir / f"storm-{asgi_server}.json")["users"]
        senders = set_up_rooms(node, tokens, n)
        ctx = _ctx()
        commands, answers = ctx.Queue(), ctx.Queue()
        sender_proc = ctx.Process(target=sender_process, args=(node.ws_url, senders, commands, answers), daemon=True)
        sender_proc.start()
        _get_while_alive(answers, [sender_proc], 120)
        send_round(commands, answers, sender_proc, 1, len(senders))  # positions past zero
        clients = [Client(token, f"storm-{i // ROOM_SIZE}") for i, token in enumerate(list(tokens.values())[:n])]
        storm = Storm(node.ws_url, clients, processes, args)
        cold = summary(f"qim {asgi_server} (cold connect)", storm.phase(), 1)
        storm.drop.set()
        storm.phase()
        wait_connections(node, admin, len(senders))
        send_round(commands, answers, sender_proc, MISSED, len(senders))
        sampler = Sampler(node.process.pid, max(3, n / 400), args.profile / f"storm-{asgi_server}.txt") if args.profile else None
        stats_before, rss_before = node_stats(node, admin), rss(node.process.pid) / 2**20
        meter, began = CpuMeter([node.process.pid]), time.monotonic()
        client_meter = CpuMeter([proc.pid for proc in storm.procs])
        storm.storm.set()
        row = summary(f"qim {asgi_server}", storm.phase(), MISSED)
        row.update(cpu_figures(meter, client_meter, began, n))
        # The collector's passes (young, middle, full) during the storm and the node's memory
        # after it: what QIM_GC_*_THRESHOLD trade (docs/performance.md,
        # "The collector: freeze and thresholds").
        stats = node_stats(node, admin)
        row["gc_passes"] = [after - before for after, before in zip(stats["gc_collections"], stats_before["gc_collections"])]
        # And their milliseconds (young, middle, full): the collector's share of the CPU above.
        row["gc_pause_ms"] = [round(after - before) for after, before in zip(stats["gc_pause_ms"], stats_before["gc_pause_ms"])]
        row["rss_growth_mib"] = round(rss(node.process.pid) / 2**20 - rss_before, 1)
        row["cold_connect_per_s"] = cold["per_s"]
        if sampler is not None and (path := sampler.wait()) is not None:
            row["profile"] = summarize(path)
        commands.put(("stop", 0))
        return row
    finally:
        if storm is not None:
            storm.close()
        if sender_proc is not None:
            sender_proc.join(timeout=10)
            if sender_proc.is_alive():
                sender_proc.kill()
        node.stop()
        backend.close()


def run_raw(args: argparse.Namespace, n: int, work_dir: Path, processes: int) -> dict[str, Any]:
    raw = RawWsServer(work_dir).start()
    storm = None
    try:
        storm = Storm(raw.ws_url, [Client(None) for _ in range(n)], processes, args)
        storm.phase()
        storm.drop.set()
        storm.phase()
        time.sleep(1.0)
        meter, began = CpuMeter([raw.process.pid]), time.monotonic()
        client_meter = CpuMeter([proc.pid for proc in storm.procs])
        storm.storm.set()
        row = summary("raw_websockets", storm.phase(), 0)
        row.update(cpu_figures(meter, client_meter, began, n))
        return row
    finally:
        if storm is not None:
            storm.close()
        raw.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 000 clients")
    parser.add_argument("--clients", type=int)
    parser.add_argument("--asgi-servers", default="daphne", help="comma-separated: daphne,uvicorn")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="connects in flight per client process")
    parser.add_argument("--sequential", action="store_true",
                        help="QIM clients wait for AUTH_OK before SYNC and ROOM_JOIN (default: one write of all three)")
    parser.add_argument("--profile", type=Path, help="py-spy the node during the storm; raw stacks here")
    args = parser.parse_args()
    n = (args.clients or (2_000 if args.quick else 10_000)) // ROOM_SIZE * ROOM_SIZE
    raise_nofile()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    processes = 2 if n <= 2_000 else 4
    rows: list[dict[str, Any]] = []
    with work_directory() as work_dir:
        rows.append(run_raw(args, n, work_dir, processes))
        for server in args.asgi_servers.split(","):
            if server == "uvicorn" and not uvicorn_available():
                continue
            rows.append(run_qim(args, n, work_dir, server, processes))
    report(args, n, processes, rows)


def report(args: argparse.Namespace, n: int, processes: int, rows: list[dict[str, Any]]) -> None:
    from pyspy import print_summary

    print_table(
        f"Reconnect storm: {n} clients in {processes} client processes, {args.concurrency} connects in flight each; "
        f"QIM ({args.backend}): AUTH + SYNC ({MISSED} missed) + ROOM_JOIN replay ({MISSED} missed), rooms of {ROOM_SIZE}, "
        f"{'AUTH_OK awaited first' if args.sequential else 'the three in one write'}; "
        "raw websockets: anonymous connects",
        ["server", "clients", "failed", "seconds", "per s", "p50 ms", "p99 ms", "max ms", "open p50", "AUTH_OK p50",
         "missed", "extra", "server CPU%", "CPU ms/client", "client CPU ms/client"],
        [[r["server"], r["clients"], r["failed"], r["seconds"], r["per_s"], r["p50_ms"], r["p99_ms"], r["max_ms"],
          r["open_p50_ms"], r["auth_ok_p50_ms"], r["missed"], r["extra"], r["server_cpu_pct"],
          r["server_cpu_ms_per_client"], r["client_cpu_ms_per_client"]] for r in rows],
    )
    for row in rows:
        if row.get("profile"):
            print_summary(f"profile of {row['server']} during the storm", row.pop("profile"))
        if row["failures"]:
            print(f"{row['server']} failures: {row['failures']}")
    raw = rows[0]
    qim = {r["server"].split()[1]: r for r in rows[1:]}
    default = qim.get("daphne") or next(iter(qim.values()), None)
    ratios = {}
    if default and raw["per_s"]:
        ratios["reconnects_vs_raw_connects"] = round(default["per_s"] / raw["per_s"], 2)
    if default and raw["server_cpu_ms_per_client"]:
        # Beside the target: server CPU per raw connect over server CPU per reconnect.
        ratios["raw_vs_qim_cpu_per_client"] = round(raw["server_cpu_ms_per_client"] / default["server_cpu_ms_per_client"], 2)
    for server, row in qim.items():
        if server != "daphne" and raw["per_s"]:
            ratios[f"reconnects_vs_raw_connects_{server}"] = round(row["per_s"] / raw["per_s"], 2)
    ok = bool(default) and all(r["missed"] == 0 and r["extra"] == 0 and r["failed"] == 0 for r in qim.values())
    emit({"scenario": "reconnect_storm", "quick": args.quick, "clients": n, "backend": args.backend,
          "pipelined": not args.sequential,
          "missed_per_client": MISSED, "room_size": ROOM_SIZE, "cases": rows, "ratios": ratios,
          "targets": {"reconnects >= 0.5x raw connects": ratios.get("reconnects_vs_raw_connects", 0) >= 0.5,
                      "nothing missed": ok}})


if __name__ == "__main__":
    main()
