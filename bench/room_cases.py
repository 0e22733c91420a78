"""The measured cases of the room benchmarks (bench/room_fanout.py, bench/big_rooms.py): a
max-rate run (a window of messages in flight) and a drained run (fixed rate or burst, then
wait for everything to arrive), each with fresh receiver processes, server and client CPU
from /proc, and py-spy profiles of the servers when asked.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from common import CpuMeter, bootstrap, percentile, populate
from loadgen import Members, Senders, Target
from pyspy import Sampler, summarize as summarize_profile

ROOM = "bench"
ROOM2 = "bench2"
# The max runs' one sender keeps 200 ROOM_SENDs in flight: past the default inbound frame
# budget (500/s), which is raised out of the way with the room's message rate.
MSG_RATE_ENV = {"QIM_ROOM_MSG_RATE": "100000", "QIM_INBOUND_FRAME_RATE": "100000"}
# Messages in flight in the max runs. The tutorial's stays under its channel capacity (100),
# past which the layer drops silently; its rate is the same at 20 or 50 (and raw websockets'
# the same from 20 to 200): both are saturated, the window is not what limits them.
WINDOW = {"qim": 200, "qim (uvicorn)": 200, "raw_websockets": 200, "tutorial": 50}
# --profile DIR: py-spy samples every server process during each max run's window and
# each fixed-rate run.
PROFILE_DIR: Path | None = None
PROFILES: dict[str, dict] = {}


class Plan:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.receivers = 200 if quick else 1000
        self.warmup_s = 0.7 if quick else 2.0
        self.measure_s = 1.5 if quick else 4.0
        self.fixed_s = 3.0 if quick else 6.0
        self.drain_s = 2.0 if quick else 5.0
        self.burst_receivers = 100 if quick else 200
        self.burst = 5 if quick else 10


def split(tokens: list, parts: int) -> list[list]:
    return [tokens[i::parts] for i in range(parts)]


def cpu_summary(meter: CpuMeter) -> tuple[float, float]:
    """Total CPU% of the processes and the busiest one's (100 = one core)."""
    each = meter.each()
    return round(sum(each), 1), round(max(each, default=0.0), 1)


def summarize(server: str, case: str, members: Members, data: dict, extra: dict[str, Any]) -> dict[str, Any]:
    lat = data["latencies"]
    row = {
        "server": server, "case": case, "receivers": members.size,
        "p50_ms": round(percentile(list(lat), 50), 1) if lat else None,
        "p99_ms": round(percentile(list(lat), 99), 1) if lat else None,
        "connect_s": round(members.connect_s, 2),
        **extra,
    }
    return row


def run_max(server: str, server_pids: list[int], parts, sender: Target, sender_token, plan: Plan,  # type: ignore[no-untyped-def]
            case: str = "max", probe=None) -> dict[str, Any]:
    """`probe()`, when given, answers counters (name -> int) read at the start and the end of
    the measured window; the row gets their growth per room message delivered in it."""
    case_started = time.monotonic()
    members = Members(parts)
    senders = None
    try:
        members.wait_ready()
        senders = Senders(sender, [sender_token], "window", {"window": WINDOW[server]})
        senders.wait_ready()
        senders.start()
        time.sleep(plan.warmup_s)
        server_cpu, client_cpu = CpuMeter(server_pids), CpuMeter(members.pids + [senders.process.pid])
        samplers = start_profiles(server, case, server_pids, plan.measure_s)
        members.recording.value = 1
        p0 = probe() if probe else {}
        c0, t0 = members.delivered(), time.monotonic()
        by_process = [c.value for c in members.counters]
        time.sleep(plan.measure_s)
        c1, t1 = members.delivered(), time.monotonic()
        by_process = [round((c.value - b) / (t1 - t0)) for c, b in zip(members.counters, by_process)]
        p1 = probe() if probe else {}
        members.recording.value = 0
        s_total, _ = cpu_summary(server_cpu)
        c_total, c_max = cpu_summary(client_cpu)
        finish_profiles(samplers)
        senders.stop_sending()
        tally = senders.result(30)
        data = members.collect()
    finally:
        members.close()
        if senders is not None:
            senders.close()
    rate = (c1 - c0) / (t1 - t0)
    frames = data["frames"]
    return summarize(server, case, members, data, {
        "deliveries_per_s": round(rate), "room_msgs_per_s": round(rate / members.size, 1),
        "frames_per_conn_s": round(sum(frames) / len(frames) / (t1 - t0), 1) if frames else 0,
        "events_per_frame": round((c1 - c0) / max(1, sum(frames)), 1),
        "lost": None, "server_cpu_pct": s_total, "client_cpu_pct": c_total, "busiest_client_cpu_pct": c_max,
        "sent": tally["sent"], "refused": tally["errors"], "deliveries_per_s_by_process": by_process,
        "per_room_msg": {k: round((p1[k] - p0[k]) / max(1.0, (c1 - c0) / members.size), 3) for k in p0},
        "case_s": round(time.monotonic() - case_started, 1),
    })


def start_profiles(server: str, case: str, pids: list[int], seconds: float) -> list[tuple[str, Sampler]]:
    if PROFILE_DIR is None:
        return []
    tag = f"{server}-{case}-{len(PROFILES)}".replace(" ", "_").replace(",", "").replace("/", "per")
    return [(f"{tag}-{i}", Sampler(pid, seconds, PROFILE_DIR / f"{tag}-{i}.txt")) for i, pid in enumerate(pids)]


def finish_profiles(samplers: list[tuple[str, Sampler]]) -> None:
    for tag, sampler in samplers:
        path = sampler.wait()
        if path is not None:
            PROFILES[tag] = summarize_profile(path)


def run_drained(server: str, case: str, server_pids: list[int], parts, sender: Target, sender_tokens,  # type: ignore[no-untyped-def]
                mode: str, params: dict, plan: Plan) -> dict[str, Any]:
    """A bounded load (fixed rate, or a burst from many senders), then wait for it to arrive:
    all of it, or nothing new for a second, or DRAIN_S after the last send."""
    case_started = time.monotonic()
    members = Members(parts)
    senders = None
    try:
        # Big rooms: 10 000 joins across two nodes took over 180 s on the shared machine.
        members.wait_ready(max(180.0, members.size / 30))
        senders = Senders(sender, sender_tokens, mode, params)
        senders.wait_ready()
        server_cpu, client_cpu = CpuMeter(server_pids), CpuMeter(members.pids + [senders.process.pid])
        metered = time.monotonic()
        members.recording.value = 1
        started = time.monotonic()
        samplers = start_profiles(server, case, server_pids, params.get("seconds", plan.drain_s)) if mode == "rate" else []
        senders.start()
        tally = senders.result(timeout=params.get("seconds", 10) + 60)
        finish_profiles(samplers)
        # Wait for every send not refused: one whose ACK timed out may still be committed.
        expected = (tally["sent"] - sum(tally["errors"].values())) * members.size
        deadline = time.monotonic() + plan.drain_s
        seen, last_progress = -1, time.monotonic()
        while time.monotonic() < deadline and members.delivered() < expected:
            now_seen = members.delivered()
            if now_seen != seen:
                seen, last_progress = now_seen, time.monotonic()
            elif time.monotonic() - last_progress > 1.5:
                break
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        s_total, _ = cpu_summary(server_cpu)
        server_cpu_s = s_total / 100 * (time.monotonic() - metered)
        c_total, c_max = cpu_summary(client_cpu)
        data = members.collect()
    finally:
        members.close()
        if senders is not None:
            senders.close()
    delivered = len(data["latencies"])
    loss = count_loss(tally["accepted_ids"], data["seen"], members.size)
    frames = data["frames"]
    span = (data["last"] - data["first"]) or elapsed
    send_s = tally["elapsed"] or elapsed
    return summarize(server, case, members, data, {
        "deliveries_per_s": round(delivered / span) if delivered else 0,
        "room_msgs_per_s": round(tally["accepted"] / send_s, 1),
        "frames_per_conn_s": round(sum(frames) / len(frames) / max(span, send_s), 1) if frames else 0,
        "max_frames_per_conn_second": data["max_frames_per_second"],
        "events_per_frame": round(delivered / max(1, sum(frames)), 2),
        # Frames the receivers got per CPU-second of the server(s) over the whole case.
        "frames": sum(frames), "server_cpu_s": round(server_cpu_s, 2),
        "frames_per_cpu_s": round(sum(frames) / server_cpu_s) if server_cpu_s > 0 else None,
        "delivered": delivered, **loss,
        "server_cpu_pct": s_total, "client_cpu_pct": c_total, "busiest_client_cpu_pct": c_max,
        "sent": tally["sent"], "accepted": tally["accepted"], "refused": tally["errors"],
        "case_s": round(time.monotonic() - case_started, 1),
    })


def count_loss(accepted_ids: list[str], seen: dict[bytes, int], size: int) -> dict[str, Any]:
    """What was really lost: every message acknowledged, or received by any member (its ACK
    may have timed out, but it was committed), is owed to each of the `size` members once;
    `lost` is the copies missing, `duplicates` the copies over one per member."""
    owed = {ident.encode() for ident in accepted_ids} | set(seen)
    expected = len(owed) * size
    lost = sum(max(0, size - seen.get(ident, 0)) for ident in owed)
    return {"expected": expected, "lost": lost, "duplicates": sum(max(0, n - size) for n in seen.values()),
            "lost_pct": round(100 * lost / expected, 1) if expected else None,
            "unacknowledged_but_delivered": len(set(seen) - {ident.encode() for ident in accepted_ids})}


# --- set-up ----------------------------------------------------------------------------------


def qim_setup(node, users: int, work_dir: Path) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    admin = bootstrap(node)
    tokens = list(populate(node, users, work_dir / "room-tokens.json")["users"].values())
    create_room(node, admin, ROOM)
    return admin, tokens


def create_room(node, admin: str, room_id: str) -> None:  # type: ignore[no-untyped-def]
    answer = httpx.post(f"{node.http_url}/api/v1/rooms", json={"room_id": room_id, "title": "bench"},
                        headers={"Authorization": f"Token {admin}"}, timeout=30)
    if answer.status_code not in (201, 409):
        raise RuntimeError(f"creating the room failed: {answer.status_code} {answer.text}")


def become_writer(node, token: str, room_id: str) -> None:  # type: ignore[no-untyped-def]
    """Join (and leave) the room once through `node`: with no writer yet, it becomes the writer."""
    import asyncio

    from loadgen import open_member

    async def join() -> None:
        ws = await open_member(Target("qim", node.ws_url, room_id), token)
        ws.abort()

    asyncio.run(join())
