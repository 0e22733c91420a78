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

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
# name -> (seconds allowed full, seconds allowed --quick)
SCRIPTS = {
    "room_fanout": (540, 150),
    "dm_isolation": (240, 120),
    "reaction_storm": (360, 120),
    "send_fanout": (300, 120),  # issue #22: full 146-171 s at load 2.5-7, --quick 68-108 s at load 4-9
    "connections": (240, 120),
    "push_senders": (300, 150),
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


# --- plots --------------------------------------------------------------------------------


def _bars(ax, labels: list[str], values: list[float], title: str, ylabel: str, log: bool = False) -> None:  # type: ignore[no-untyped-def]
    bars = ax.bar(range(len(values)), [v or 0 for v in values], color="#4878a8")
    ax.set_xticks(range(len(values)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)
    if log:
        ax.set_yscale("log")
    for bar, value in zip(bars, values):
        ax.annotate(f"{value:g}" if value is not None else "-", (bar.get_x() + bar.get_width() / 2, bar.get_height() or 0),
                    ha="center", va="bottom", fontsize=7)


def _hbars(ax, labels: list[str], values: list[float], title: str, xlabel: str, log: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Horizontal bars: room for long labels (server, case)."""
    ax.barh(range(len(values)), [v or 0 for v in values], color="#4878a8")
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=8)
    if log:
        ax.set_xscale("log")
    for i, value in enumerate(values):
        ax.annotate(f"{value:,.0f}" if value is not None else "-", (value or 0, i), va="center", fontsize=7,
                    xytext=(2, 0), textcoords="offset points")


def plot_room_fanout(result: dict, fig) -> None:  # type: ignore[no-untyped-def]
    cases = result["cases"]
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.4, 1, 1]})
    top = [c for c in cases if c["case"].startswith("max")]
    _hbars(axes[0], [f"{c['server']}, {c['case']}" for c in top], [c["deliveries_per_s"] for c in top],
           "max: deliveries/s (log)", "deliveries/s", log=True)
    fixed = [c for c in cases if c["case"] == "20/s"]
    labels = [c["server"] for c in fixed]
    width = 0.4
    axes[1].bar([i - width / 2 for i in range(len(fixed))], [c["p50_ms"] or 0 for c in fixed], width, label="p50")
    axes[1].bar([i + width / 2 for i in range(len(fixed))], [c["p99_ms"] or 0 for c in fixed], width, label="p99")
    axes[1].set_xticks(range(len(fixed)), labels, fontsize=7, rotation=15)
    axes[1].set_yscale("log")
    axes[1].axhline(250, color="red", linewidth=0.8, linestyle="--", label="target p99 250 ms")
    axes[1].set_title("20 msg/s: latency ms (log)", fontsize=10)
    axes[1].legend(fontsize=7)
    lossy = [c for c in cases if c.get("lost_pct") is not None]
    _hbars(axes[2], [f"{c['server']}, {c['case']}" for c in lossy], [c["lost_pct"] for c in lossy], "lost %", "% of deliveries")


def plot_dm_isolation(result: dict, fig) -> None:  # type: ignore[no-untyped-def]
    cases = result["cases"]
    ax = fig.subplots(1, 1)
    width = 0.25
    for k, (field, label) in enumerate([("dm_p50_ms", "p50"), ("dm_p99_ms", "p99"), ("dm_max_ms", "max")]):
        ax.bar([i + (k - 1) * width for i in range(len(cases))], [c[field] or 0 for c in cases], width, label=label)
    ax.set_xticks(range(len(cases)), [c["phase"] for c in cases])
    ax.set_ylabel("DM delivery latency, ms")
    ax.set_title(f"DM latency alone and under a room flood (p99 ratio {result['ratios']['p99_flood_vs_alone']})", fontsize=10)
    ax.legend(fontsize=8)


def plot_reaction_storm(result: dict, fig) -> None:  # type: ignore[no-untyped-def]
    row = result["cases"][0]
    axes = fig.subplots(1, 2)
    _bars(axes[0], ["REACT/s", "target"], [row["reacts_per_s"], 500], f"{row['reactors']} REACTs, {row['members']} members", "REACT/s")
    _bars(axes[1], ["REACTs", "UPDATE frames / observer"], [row["acks"], row["frames_per_observer_mean"]],
          "what observers got", "count", log=True)


def plot_send_fanout(result: dict, fig) -> None:  # type: ignore[no-untyped-def]
    ax = fig.subplots(1, 1)
    for backend, marker in (("sqlite", "o"), ("postgres", "s")):
        rows = [c for c in result["cases"] if c["backend"] == backend]
        if not rows:
            continue
        ax.plot([r["members"] for r in rows], [r["sends_per_s"] for r in rows], marker=marker, label=f"QIM {backend}")
        ax.plot([r["members"] for r in rows], [r["raw_sql_sends_per_s"] for r in rows], marker=marker, linestyle="--",
                label=f"raw SQL {backend}")
        copied = [r for r in rows if r.get("copy_sends_per_s")]
        if copied:
            ax.plot([r["members"] for r in copied], [r["copy_sends_per_s"] for r in copied], marker=marker,
                    linestyle=":", label=f"COPY {backend}")
    ax.axhline(50, color="red", linewidth=0.8, linestyle=":", label="target 50/s (PostgreSQL, 1 000)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("group members")
    ax.set_ylabel("SEND/s")
    ax.set_title("SEND throughput by group size", fontsize=10)
    ax.legend(fontsize=7)


def plot_connections(result: dict, fig) -> None:  # type: ignore[no-untyped-def]
    rows = result["cases"]
    axes = fig.subplots(1, 2)
    _bars(axes[0], [r["server"] for r in rows], [r["kib_per_connection"] for r in rows],
          f"KiB per idle connection ({result['connections']})", "KiB")
    axes[0].axhline(50, color="red", linewidth=0.8, linestyle="--")
    _bars(axes[1], [r["server"] for r in rows], [r["connect_s"] for r in rows], "seconds to connect all", "s")


PLOTS = {"room_fanout": plot_room_fanout, "dm_isolation": plot_dm_isolation, "reaction_storm": plot_reaction_storm,
         "send_fanout": plot_send_fanout, "connections": plot_connections}


def plot(name: str, result: dict, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(12, 4.2))
    try:
        PLOTS[name](result, fig)
        fig.suptitle(f"{name}{' (quick)' if result.get('quick') else ''}", fontsize=11)
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        return True
    except Exception as exc:  # a plot never fails the run
        print(f"plotting {name} failed: {exc!r}")
        return False
    finally:
        plt.close(fig)


# --- the report -------------------------------------------------------------------------------


def write_report(runs: list[dict], info: dict, quick: bool, stamp: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{stamp}.md"
    out = [f"# Benchmarks {stamp}{' (--quick)' if quick else ''}", "",
           f"Machine: {info['nproc']} cores, {info['cpu']}, {info['ram_gib']} GiB RAM, Python {info['python']}; "
           f"load average before: {info['load_before']}, after: {info.get('load_after')}.",
           f"Total: {info['total_s']} s.", "", "## Summary", "",
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
