"""Room fan-out: one room, 1 000 receivers (--quick: 200), one sender; QIM side by side with a
Channels-tutorial room (bench/baselines/tutorial_room.py, same daphne, same channel layer) and
a raw `websockets.broadcast` server (bench/baselines/raw_ws.py), the same receivers for all.

    python bench/room_fanout.py [--quick] [--only one_node,two_nodes] [--profile DIR]

Receivers are two lean processes (bench/lean_ws.py, compression off); every case has fresh ones.
- max: as fast as the room accepts. The sender keeps WINDOW messages in flight; one leaves the
  window when the sender, a member like the others, receives it back. QIM runs with
  QIM_ROOM_MSG_RATE raised (MSG_RATE_ENV) at the default frame rate, and once more with
  QIM_ROOM_OUTBOUND_FRAME_RATE raised too (THROUGHPUT_ENV, "frame rate 50"). Deliveries (events
  received: QIM merges many per frame) are counted over a window after a warm-up.
- 20/s: a fixed 20 msg/s with QIM's default limits; p50/p99 latency from the send time inside
  each payload; lost: not delivered within DRAIN_S after the last send; frames per connection
  per second, and the most any connection got in one wall-clock second.
- 20 senders: SENDERS connections send `burst` messages each, all at once, to a smaller room
  (QIM with its rate raised, the tutorial at the default layer capacity, 100): lost deliveries.
- two nodes on Redis (QIM on PostgreSQL): receivers split over the nodes, the sender on the
  first; the room's writer on the sender's node, then (full runs) on the other. Channel-layer
  messages per room message: QIM's node counters (layer_messages_sent / _received), the
  tutorial's consumers (one dispatch per member reached), and redis-server's INFO
  commandstats for both (ZADD: channels_redis stores each message once and backs it up once
  while a receiver takes it).
- unmerged, and big rooms (bench/big_rooms.py, issue 22 items 3 and 4): one event per frame
  against raw websockets at the same offered load, frames per server CPU-second, the two
  alternated in UNMERGED_ROUNDS rounds (the ratio is the rounds' median); 20 msg/s
  to 5 000 receivers on one node and to 10 000 on two (--quick: 1 000 and 2 000).
- qim (uvicorn): the same QIM app served by uvicorn, when it is installed (full runs only).
--quick skips the informational cases (frame rate 50, remote writer, uvicorn).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import room_cases
from common import (
    Backend,
    RawWsServer,
    RedisServer,
    emit,
    print_table,
    start_node,
    start_tutorial,
    uvicorn_available,
    work_directory,
)
from big_rooms import UNMERGED_ENV, BigPlan, UnmergedSide, one_node_big, two_nodes_big, unmerged_against_raw
from big_rooms import report as report_big_rooms
from loadgen import Target
from pyspy import print_summary
from room_cases import (
    MSG_RATE_ENV,
    PROFILES,
    ROOM,
    ROOM2,
    WINDOW,
    Plan,
    become_writer,
    create_room,
    qim_setup,
    run_drained,
    run_max,
    split,
)

RECEIVER_PROCESSES = 2
# The max runs: the room's message rate raised out of the way (MSG_RATE_ENV), at the default
# frame rate (10) and with room_outbound_frame_rate raised too.
THROUGHPUT_ENV = {**MSG_RATE_ENV, "QIM_ROOM_OUTBOUND_FRAME_RATE": "50"}
FIXED_RATE = 20.0
SENDERS = 20
BIG_ROOM = "bench3"


# --- one node ------------------------------------------------------------------------------


def one_node(plan: Plan, work_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    n = plan.receivers
    backend = Backend("sqlite", work_dir)
    db = backend.database("rooms")
    node = start_node(db, work_dir, "room-a", run_env=MSG_RATE_ENV)
    big = BigPlan(plan)
    try:
        _, tokens = qim_setup(node, max(n, big.one_node, big.unmerged_receivers) + SENDERS + 1, work_dir)
        receivers, senders = tokens[:n], tokens[-SENDERS - 1:]
        qim = Target("qim", node.ws_url, ROOM)
        parts = [(qim, part) for part in split(receivers, RECEIVER_PROCESSES)]
        rows.append(run_max("qim", [node.process.pid], parts, qim, senders[0], plan))
        burst_parts = [(qim, part) for part in split(receivers[: plan.burst_receivers], RECEIVER_PROCESSES)]
        rows.append(run_drained("qim", f"{SENDERS} senders", [node.process.pid], burst_parts, qim, senders[:SENDERS],
                                "burst", {"count": plan.burst}, plan))
        node.stop()
        node.start(UNMERGED_ENV)
        # Raw websockets' unmerged runs alternate with QIM's, both servers up (unmerged_rounds).
        rows += unmerged_against_raw(work_dir, plan, UnmergedSide("qim", [node.process.pid], qim, tokens, senders[0]),
                                     big.unmerged_receivers)
        if not plan.quick:  # informational; --quick skips it
            node.stop()
            node.start(THROUGHPUT_ENV)
            rows.append(run_max("qim", [node.process.pid], parts, qim, senders[0], plan, case="max, frame rate 50"))
        node.stop()
        node.start()  # default limits: room_msg_rate 20, room_outbound_frame_rate 10
        rows.append(run_drained("qim", "20/s", [node.process.pid], parts, qim, senders[0:1],
                                "rate", {"rate": FIXED_RATE, "seconds": plan.fixed_s}, plan))
        rows.append(one_node_big(plan, node, tokens))
        if uvicorn_available() and not plan.quick:
            # The same QIM application served by uvicorn instead of daphne, side by side.
            node.stop()
            node.asgi_server = "uvicorn"
            node.start(MSG_RATE_ENV)
            rows.append(run_max("qim (uvicorn)", [node.process.pid], parts, qim, senders[0], plan))
            node.stop()
            node.start()
            rows.append(run_drained("qim (uvicorn)", "20/s", [node.process.pid], parts, qim, senders[0:1],
                                    "rate", {"rate": FIXED_RATE, "seconds": plan.fixed_s}, plan))
    finally:
        node.stop()
        backend.close()

    rows += one_node_baselines(plan, work_dir)
    return rows


def one_node_baselines(plan: Plan, work_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    n = plan.receivers
    # The baselines keep one server for all their cases (each case has fresh receivers; a
    # consumer that disconnects takes its queued messages with it).
    anonymous: list[str | None] = [None] * n
    tutorial = start_tutorial(work_dir, "tutorial-a")
    try:
        target, pids = Target("tutorial", tutorial.ws_url), [tutorial.process.pid]
        parts = [(target, part) for part in split(anonymous, RECEIVER_PROCESSES)]
        rows.append(run_max("tutorial", pids, parts, target, None, plan))
        burst_parts = [(target, part) for part in split(anonymous[: plan.burst_receivers], RECEIVER_PROCESSES)]
        rows.append(run_drained("tutorial", f"{SENDERS} senders", pids, burst_parts, target, [None] * SENDERS, "burst",
                                {"count": plan.burst}, plan))
        rows.append(run_drained("tutorial", "20/s", pids, parts, target, [None], "rate",
                                {"rate": FIXED_RATE, "seconds": plan.fixed_s}, plan))
    finally:
        tutorial.stop()

    raw = RawWsServer(work_dir).start()
    try:
        target, pids = Target("raw", raw.ws_url), [raw.process.pid]
        parts = [(target, part) for part in split(anonymous, RECEIVER_PROCESSES)]
        rows.append(run_max("raw_websockets", pids, parts, target, None, plan))
        rows.append(run_drained("raw_websockets", "20/s", pids, parts, target, [None], "rate",
                                {"rate": FIXED_RATE, "seconds": plan.fixed_s}, plan))
    finally:
        raw.stop()
    return rows



# --- two nodes on Redis ----------------------------------------------------------------------


def two_nodes(plan: Plan, work_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    n = plan.receivers
    redis = RedisServer(work_dir).start()
    backend = Backend("postgres", work_dir)
    try:
        db = backend.database("rooms2")
        env = {"QIM_REDIS_URL": redis.url}
        a = start_node(db, work_dir, "room2-a", env, run_env=MSG_RATE_ENV)
        b = None
        try:
            b = start_node(db, work_dir, "room2-b", env, run_env=MSG_RATE_ENV)
            admin, tokens = qim_setup(a, max(n, BigPlan(plan).two_nodes) + 1, work_dir)
            create_room(a, admin, ROOM2)
            create_room(a, admin, BIG_ROOM)
            halves = split(tokens[:n], 2)
            redis.reset_stats()

            def probe() -> dict[str, int]:
                stats = [x.stats(admin)["counters"] for x in (a, b)]
                return {"layer_sent": sum(c.get("layer_messages_sent", 0) for c in stats),
                        "layer_received": sum(c.get("layer_messages_received", 0) for c in stats),
                        "redis_zadd": redis.command_calls().get("zadd", 0)}

            # The first ROOM_JOIN makes its node the writer: the sender's node, then the other.
            cases = [("max, 2 nodes", a, ROOM), ("max, 2 nodes, remote writer", b, ROOM2)]
            for case, writer, room in cases[:1] if plan.quick else cases:  # --quick skips the second
                become_writer(writer, tokens[-1], room)
                parts = [(Target("qim", a.ws_url, room), halves[0]), (Target("qim", b.ws_url, room), halves[1])]
                row = run_max("qim", [a.process.pid, b.process.pid], parts, Target("qim", a.ws_url, room), tokens[-1],
                              plan, case=case, probe=probe)
                per = row["per_room_msg"]
                row.update({"nodes_with_members": 2, "layer_msgs_per_room_msg": per["layer_sent"],
                            "layer_received_per_room_msg": per["layer_received"],
                            "redis_zadd_per_room_msg": per["redis_zadd"]})
                rows.append(row)
            # The big room on the same nodes: room_msg_rate stays raised, which a sender at
            # 20/s never meets; the outbound side (frame rate 10, merging) is at its defaults.
            become_writer(a, tokens[-1], BIG_ROOM)
            rows.append(two_nodes_big(plan, a, b, BIG_ROOM, tokens))
        finally:
            a.stop()
            if b is not None:
                b.stop()
    finally:
        backend.close()

    try:
        rows.append(two_nodes_tutorial(plan, work_dir, redis))
    finally:
        redis.stop()
    return rows


def two_nodes_tutorial(plan: Plan, work_dir: Path, redis: RedisServer) -> dict[str, Any]:
    """The tutorial room on two daphne nodes over the same redis-server (QIM's nodes stopped)."""
    n = plan.receivers
    redis.reset_stats(flush=True)  # QIM's nodes are stopped
    env = {"BENCH_REDIS_URL": redis.url}
    ta = start_tutorial(work_dir, "tutorial2-a", env)
    tb = None
    try:
        tb = start_tutorial(work_dir, "tutorial2-b", env)
        redis.reset_stats()
        halves = split([None] * n, 2)
        parts = [(Target("tutorial", ta.ws_url), halves[0]), (Target("tutorial", tb.ws_url), halves[1])]

        def probe() -> dict[str, int]:
            counts = [ta.counters(), tb.counters()]
            return {"group_send": sum(c.get("group_send", 0) for c in counts),
                    "layer_received": sum(c.get("layer_received", 0) for c in counts),
                    "redis_zadd": redis.command_calls().get("zadd", 0)}

        row = run_max("tutorial", [ta.process.pid, tb.process.pid], parts, Target("tutorial", ta.ws_url), None, plan,
                      case="max, 2 nodes", probe=probe)
        # Per group_send here: the tutorial may drop (capacity 100), so deliveries undercount messages.
        per = row["per_room_msg"]
        sends = per["group_send"] or 1
        row.update({"nodes_with_members": 2, "layer_msgs_per_room_msg": round(per["layer_received"] / sends, 3),
                    "layer_received_per_room_msg": round(per["layer_received"] / sends, 3),
                    "redis_zadd_per_room_msg": round(per["redis_zadd"] / sends, 3)})
        return row
    finally:
        ta.stop()
        if tb is not None:
            tb.stop()


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 receivers and shorter runs")
    parser.add_argument("--only", default="one_node,two_nodes", help="one_node, two_nodes")
    parser.add_argument("--profile", type=Path, help="py-spy each server during the max runs; raw stacks here")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        room_cases.PROFILE_DIR = args.profile
    plan = Plan(args.quick)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with work_directory() as work_dir:
        if "one_node" in args.only:
            rows += one_node(plan, work_dir)
        if "two_nodes" in args.only:
            rows += two_nodes(plan, work_dir)

    def find(server: str, case: str) -> dict[str, Any]:
        return next((r for r in rows if r["server"] == server and r["case"] == case), {})

    print_table(
        f"Room fan-out: {plan.receivers} receivers in {RECEIVER_PROCESSES} lean processes, 64-byte messages "
        f"(max: in flight {WINDOW}, QIM with {MSG_RATE_ENV}, 'frame rate 50' with {THROUGHPUT_ENV}; "
        "20/s: default limits)",
        ["server", "case", "recv", "deliv/s", "msg/s", "p50 ms", "p99 ms", "lost", "frames/conn/s", "max frames/s",
         "ev/frame", "server CPU%", "clients CPU%", "busiest client%"],
        [[r["server"], r["case"], r["receivers"], r["deliveries_per_s"], r["room_msgs_per_s"], r["p50_ms"], r["p99_ms"],
          r.get("lost"), r["frames_per_conn_s"], r.get("max_frames_per_conn_second", "-"), r["events_per_frame"],
          r["server_cpu_pct"], r["client_cpu_pct"], r["busiest_client_cpu_pct"]] for r in rows if not r.get("failed")],
    )
    two = [r for r in rows if r["case"].startswith("max, 2 nodes")]
    if two:
        print_table(
            "Two nodes on Redis: channel-layer messages per room message (QIM: node counters; tutorial: consumer "
            "dispatches; both: Redis ZADD calls from INFO commandstats)",
            ["server", "case", "deliv/s", "layer msgs sent/msg", "layer msgs handled/msg", "redis ZADD/msg", "server CPU%"],
            [[r["server"], r["case"], r["deliveries_per_s"], r["layer_msgs_per_room_msg"], r["layer_received_per_room_msg"],
              r["redis_zadd_per_room_msg"], r["server_cpu_pct"]] for r in two],
        )
    qim_max, tut_max, raw_max = find("qim", "max"), find("tutorial", "max"), find("raw_websockets", "max")
    fixed = find("qim", "20/s")
    qim2 = find("qim", "max, 2 nodes")
    qim_50 = find("qim", "max, frame rate 50")
    uvicorn_max = find("qim (uvicorn)", "max")
    ratios = {
        "qim_vs_tutorial": ratio(qim_max.get("deliveries_per_s"), tut_max.get("deliveries_per_s")),
        "qim_vs_raw_websockets": ratio(qim_max.get("deliveries_per_s"), raw_max.get("deliveries_per_s")),
        "qim_frame_rate_50_vs_tutorial": ratio(qim_50.get("deliveries_per_s"), tut_max.get("deliveries_per_s")),
        "qim_frame_rate_50_vs_raw_websockets": ratio(qim_50.get("deliveries_per_s"), raw_max.get("deliveries_per_s")),
        "qim_uvicorn_vs_qim_daphne": ratio(uvicorn_max.get("deliveries_per_s"), qim_max.get("deliveries_per_s")),
        "two_nodes_qim_vs_tutorial": ratio(qim2.get("deliveries_per_s"), find("tutorial", "max, 2 nodes").get("deliveries_per_s")),
    }
    targets = {
        "20/s p99 <= 250 ms": bool(fixed.get("p99_ms") is not None and fixed["p99_ms"] <= 250),
        "20/s nothing lost": fixed.get("lost") == 0,
        "20/s frames per connection per second <= room_outbound_frame_rate (10)": bool(
            fixed and fixed.get("max_frames_per_conn_second", 99) <= 10),
        "qim_vs_tutorial >= 15": bool(ratios["qim_vs_tutorial"] and ratios["qim_vs_tutorial"] >= 15),
        "qim_vs_raw_websockets >= 0.5": bool(ratios["qim_vs_raw_websockets"] and ratios["qim_vs_raw_websockets"] >= 0.5),
        "cross-node messages per room message <= nodes with members": bool(
            qim2 and qim2["layer_msgs_per_room_msg"] <= qim2["nodes_with_members"]),
    }
    big_ratios, big_targets = report_big_rooms(rows)
    ratios.update(big_ratios)
    targets.update(big_targets)
    for tag, summary in PROFILES.items():
        print_summary(f"profile {tag}", summary)
    emit({"scenario": "room_fanout", "profiles": PROFILES, "quick": args.quick, "receivers": plan.receivers, "window": WINDOW,
          "msg_rate_env": MSG_RATE_ENV, "throughput_env": THROUGHPUT_ENV, "unmerged_env": UNMERGED_ENV, "seconds": round(time.monotonic() - started, 1),
          "cases": rows, "ratios": ratios, "targets": targets})


if __name__ == "__main__":
    main()
