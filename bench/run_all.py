"""Run every benchmark, collect each one's last JSON line, and write the report:
bench/results/<date>.md with each scenario's table and ratios, and a PNG plot per scenario.

    python bench/run_all.py [--quick] [--only room_fanout,dm_isolation,...]
    python bench/run_all.py --replot bench/results/<stamp>.json   # redraw the plots only

What `make bench` runs. Each script runs in its own process with a time limit; one that fails
is reported as failed and the others still run; the exit code says whether all succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from plots import plot

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
# name -> (seconds allowed full, seconds allowed --quick)
SCRIPTS = {
    # Issue 22 added the unmerged case and the big rooms (5 000 on one node, 10 000 on two;
    # --quick 1 000 and 2 000): --quick took 173 s at load average 8-9 on the shared machine.
    "room_fanout": (900, 180),
    "dm_isolation": (240, 120),
    "reaction_storm": (360, 120),
    # issue #22: full 146-190 s at load 2.5-8, --quick 67-108 s at load 3-9; third round
    # (QIM and COPY alternated in slices, one load process a side): full 270 s and --quick
    # 184 s at load 9.5-10, most of it starting servers and populating (the alternated
    # 1 000-member case 21 s in --quick), so about the quiet machine's 87 s --quick + 5 s.
    "send_fanout": (300, 120),
    # issue #22, second round: QIM idle window 30 s (was 10): quiet machine 115 s full, 66 s
    # --quick before it, so about 135 / 86 s; here at load average 12: 7-8 min full, 182 s quick.
    "connections": (480, 120),
    "push_senders": (300, 150),
    "reconnect_storm": (300, 110),
    # issue #34: a 100 000-member group in mention_only on PostgreSQL (populating it is most of it).
    "large_groups": (600, 240),
    # QIM_SERVER_TUNING on and off, side by side (density, reconnects, fan-out at --quick sizes).
    "server_tuning": (600, 300),
}


def machine() -> dict[str, Any]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gib = None
    try:
        import psutil

        ram_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "ram_gib": ram_gib, "python": platform.python_version(),
            "load_before": [round(x, 2) for x in os.getloadavg()]}


def run_script(name: str, quick: bool, timeout: float) -> dict[str, Any]:
    argv = [sys.executable, str(BENCH / f"{name}.py")] + (["--quick"] if quick else [])
    started = time.monotonic()
    print(f"\n=== {name}{' --quick' if quick else ''} (limit {timeout:g} s)", flush=True)
    # Its own session, so that whatever it leaves behind can be ended as one group.
    process = subprocess.Popen(argv, cwd=BENCH.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM first: the script stops the servers it started (bench/common.py), then exits.
        process.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        stderr = f"timed out after {timeout:g} s\n{stderr}"
        code = -1
    try:
        os.killpg(process.pid, signal.SIGKILL)  # anything of its group still alive
    except ProcessLookupError:
        pass
    elapsed = round(time.monotonic() - started, 1)
    lines = stdout.strip().splitlines()
    result = None
    if code == 0 and lines:
        try:
            result = json.loads(lines[-1])
        except json.JSONDecodeError:
            result = None
    table = "\n".join(lines[:-1] if result is not None else lines).strip()
    print(table, flush=True)
    if result is None:
        print(f"FAILED ({code}):\n{stderr[-3000:]}", flush=True)
    return {"name": name, "seconds": elapsed, "result": result, "table": table,
            "error": None if result is not None else f"exit {code}: {stderr[-3000:]}"}


# --- the report -------------------------------------------------------------------------------


# The bars issue #22 set, each read from its scenario's JSON `ratios`: (scenario, key, bound).
# A positive bound is a floor (>=), a negative one a ceiling (<= its absolute value).
BARS = [
    ("connections", "qim_vs_raw_websockets_kib_per_connection", -1.5),
    ("connections", "idle_cpu_pct", -1.0),
    ("reconnect_storm", "reconnects_vs_raw_connects", 0.5),
    ("room_fanout", "unmerged_frames_per_cpu_vs_raw", 1.0),
    ("room_fanout", "room_5000_p99_ms", -250.0),
    ("room_fanout", "room_10000_two_nodes_p99_ms", -250.0),
    ("send_fanout", "send_vs_copy_1000", 0.5),
    ("dm_isolation", "p99_flood_vs_alone", -1.5),
]


def bar_lines(runs: list[dict]) -> list[str]:
    """The bars as a table: the figure this run measured, the bound, met or not."""
    found = {run["name"]: (run["result"] or {}).get("ratios", {}) for run in runs}
    out = ["| scenario | figure | this run | bar | met |", "| --- | --- | --- | --- | --- |"]
    for scenario, key, bound in BARS:
        if scenario not in found:
            continue
        value = found[scenario].get(key)
        met = None if value is None else (value >= bound if bound > 0 else value <= -bound)
        bar = f">= {bound:g}" if bound > 0 else f"<= {-bound:g}"
        out.append(f"| {scenario} | `{key}` | {value if value is not None else '-'} | {bar} | "
                   f"{'-' if met is None else ('met' if met else '**missed**')} |")
    return out


def write_report(runs: list[dict], info: dict, quick: bool, stamp: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{stamp}.md"
    out = [f"# Benchmarks {stamp}{' (--quick)' if quick else ''}", "",
           f"Machine: {info['nproc']} cores, {info['cpu']}, {info['ram_gib']} GiB RAM, Python {info['python']}; "
           f"load average before: {info['load_before']}, after: {info.get('load_after')}.",
           f"Total: {info['total_s']} s.", "", "## The bars of issue 22", "", *bar_lines(runs), "", "## Summary", "",
           "| scenario | seconds | ratios | targets met | targets missed |", "| --- | --- | --- | --- | --- |"]
    for run in runs:
        result = run["result"]
        if result is None:
            out.append(f"| {run['name']} | {run['seconds']} | FAILED | | |")
            continue
        targets = result.get("targets", {})
        out.append(f"| {run['name']} | {run['seconds']} | "
                   + ", ".join(f"{k} {v}" for k, v in result.get("ratios", {}).items()) + " | "
                   + "; ".join(k for k, v in targets.items() if v) + " | "
                   + "; ".join(k for k, v in targets.items() if not v) + " |")
    for run in runs:
        out += ["", f"## {run['name']}", ""]
        if run["result"] is None:
            out += ["FAILED:", "", "```", run["error"] or "", "```"]
            continue
        out += ["```", run["table"], "```", "", f"ratios: `{json.dumps(run['result'].get('ratios', {}))}`", ""]
        if run.get("plot"):
            out.append(f"![{run['name']}]({run['plot']})")
    path.write_text("\n".join(out) + "\n")
    raw = RESULTS / f"{stamp}.json"
    raw.write_text(json.dumps({"machine": info, "runs": [{k: v for k, v in r.items() if k != "table"} for r in runs]},
                              indent=1, sort_keys=True))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every script with --quick")
    parser.add_argument("--only", default=",".join(SCRIPTS))
    parser.add_argument("--replot", type=Path, help="only redraw the PNGs of a results/<stamp>.json")
    args = parser.parse_args()
    if args.replot:
        stamp = args.replot.stem
        for run in json.loads(args.replot.read_text())["runs"]:
            if run["result"] is not None:
                plot(run["name"], run["result"], RESULTS / f"{stamp}-{run['name']}.png")
        return
    info = machine()
    stamp = time.strftime("%Y-%m-%d-%H%M") + ("-quick" if args.quick else "")
    started = time.monotonic()
    runs = []
    for name in args.only.split(","):
        full, quick = SCRIPTS[name]
        run = run_script(name, args.quick, quick if args.quick else full)
        if run["result"] is not None:
            png = f"{stamp}-{name}.png"
            RESULTS.mkdir(exist_ok=True)
            if plot(name, run["result"], RESULTS / png):
                run["plot"] = png
        runs.append(run)
    info["total_s"] = round(time.monotonic() - started, 1)
    info["load_after"] = [round(x, 2) for x in os.getloadavg()]
    report = write_report(runs, info, args.quick, stamp)
    print(f"\n=== summary ({info['total_s']} s; report {report.relative_to(BENCH.parent)})")
    for run in runs:
        result = run["result"]
        if result is None:
            print(f"  {run['name']:15s} FAILED")
            continue
        missed = [k for k, v in result.get("targets", {}).items() if not v]
        print(f"  {run['name']:15s} {run['seconds']:6.1f} s  ratios {json.dumps(result.get('ratios', {}))}")
        print(f"  {'':15s} targets missed: {'; '.join(missed) if missed else 'none'}")
    sys.exit(0 if all(r["result"] is not None for r in runs) else 1)


if __name__ == "__main__":
    main()
