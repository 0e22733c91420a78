"""What QIM's replacements of daphne's, autobahn's and Twisted's internals buy: the same
scenarios with QIM_SERVER_TUNING=on and =off side by side, in one run.

    python bench/server_tuning.py [--quick] [--rounds N]

Three figures, each from its own scenario script run as a child with the mode in its
environment (the nodes it starts inherit it, tests/harness/qim_process.py):
- density: KiB of node memory per idle connection and the idle node's CPU (connections.py);
- reconnects: reconnects/s and node CPU ms per reconnect in a storm (reconnect_storm.py);
- fan-out: node CPU per room frame with one event per frame, and the node's CPU while
  senders push a room's most (room_fanout.py, one node).
The modes alternate (on, off, on, off, ...) so a slow phase of the machine falls on both.
The last stdout line is the JSON: `figures` per mode (medians over the rounds) and `ratios`
`*_off_vs_on` (above 1 for memory and CPU means off costs more; below 1 for rates means off
does less). Sizes: the scenarios' --quick sizes (2 000 idle connections, a 2 000-client
storm, 200 receivers); --quick here uses 1 000 of each. --rounds N alternates N rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import emit, print_table

BENCH = Path(__file__).resolve().parent
MODES = ("on", "off")


def scenarios(quick: bool) -> dict[str, list[str]]:
    """Each scenario's command line: QIM alone where the script can leave its baselines out."""
    small = ["--connections", "1000", "--idle-s", "10"] if quick else ["--quick"]
    return {
        "connections": ["connections.py", "--servers", "qim", *small],
        "reconnect_storm": ["reconnect_storm.py", *(["--clients", "1000"] if quick else ["--quick"])],
        "room_fanout": ["room_fanout.py", "--quick", "--only", "one_node"],
    }


def run(command: list[str], mode: str, timeout: float) -> dict[str, Any]:
    """The scenario's JSON line, run with QIM_SERVER_TUNING=`mode`."""
    env = {**os.environ, "QIM_SERVER_TUNING": mode}
    done = subprocess.run([sys.executable, str(BENCH / command[0]), *command[1:]], cwd=BENCH.parent, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{command[0]} ({mode}) failed: {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def qim_case(result: dict[str, Any], server: str, case: str | None = None) -> dict[str, Any]:
    for row in result["cases"]:
        if row.get("server") == server and (case is None or row.get("case") == case):
            return row
    raise KeyError(f"no {server} {case or ''} case in {result.get('scenario')}")


def figures(name: str, result: dict[str, Any]) -> dict[str, float]:
    """The figures this benchmark compares, from one scenario's JSON line."""
    if name == "connections":
        row = qim_case(result, "qim")
        return {"kib_per_connection": row["kib_per_connection"], "idle_cpu_pct": row["server_cpu_idle_pct"]}
    if name == "reconnect_storm":
        row = qim_case(result, "qim daphne")
        return {"reconnects_per_s": row["per_s"], "cpu_ms_per_reconnect": row["server_cpu_ms_per_client"]}
    unmerged, most = qim_case(result, "qim", "unmerged"), qim_case(result, "qim", "max")
    # One event per frame: what writing a frame to a socket costs the node. At the most a
    # sender can push, both modes deliver the same (the senders' window bounds it): the node's
    # CPU for that rate is the figure.
    return {"room_us_per_frame": unmerged["server_us_per_frame"], "room_max_cpu_pct": most["server_cpu_pct"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 000 connections and clients, one round")
    parser.add_argument("--rounds", type=int, default=1, help="alternated rounds per mode")
    args = parser.parse_args()
    rounds = args.rounds
    started = time.monotonic()
    samples: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES}
    for _ in range(rounds):
        for name, command in scenarios(args.quick).items():
            for mode in MODES:
                for key, value in figures(name, run(command, mode, 600)).items():
                    samples[mode].setdefault(key, []).append(value)
    medians = {mode: {key: statistics.median(values) for key, values in found.items()} for mode, found in samples.items()}
    ratios = {f"{key}_off_vs_on": round(medians["off"][key] / medians["on"][key], 2) if medians["on"][key] else None
              for key in medians["on"]}
    print_table(
        f"QIM_SERVER_TUNING on and off, medians of {rounds} alternated round(s)",
        ["figure", "on", "off", "off / on"],
        [[key, medians["on"][key], medians["off"][key], ratios[f"{key}_off_vs_on"]] for key in medians["on"]],
    )
    emit({
        "scenario": "server_tuning", "quick": args.quick, "rounds": rounds, "figures": medians, "samples": samples,
        "ratios": ratios, "targets": {}, "seconds": round(time.monotonic() - started, 1),
    })


if __name__ == "__main__":
    main()
