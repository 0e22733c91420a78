"""py-spy around a benchmark: sample a server process for a while, then say where time went.

    python bench/pyspy.py summarize FILE.txt [--top 30]

Benchmarks take `--profile DIR` and call `Sampler` around their measurement window; py-spy
must be installed (`pip install py-spy`; not a requirement of the benchmarks otherwise).
Samples are py-spy's raw (collapsed) stacks; `summarize` answers the share of samples by
layer (the first matching rule of LAYERS, innermost frame outwards) and the heaviest
functions, inclusive and self.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
from pathlib import Path

# (layer, pattern on "function (file:line)"). A sample counts for the innermost frame that is
# not GENERIC (the event loop, selectors, threads, collections): the code that asked for that
# work. Twisted's addWriter -> asyncio.add_writer -> selectors.modify is Twisted's cost.
GENERIC = re.compile(r"\((asyncio/|selectors\.py|threading\.py|concurrent/|collections/|weakref\.py|functools\.py|"
                     r"contextlib\.py|queue\.py|copy\.py|enum\.py|typing\.py|abc\.py|<frozen)")
LAYERS = [
    ("database (ORM, driver)", re.compile(r"django/db/|psycopg|sqlite3")),
    ("channel layer (channels, channels_redis, redis)", re.compile(r"channels/layers|channels_redis/|redis/")),
    ("autobahn (WebSocket framing)", re.compile(r"autobahn/")),
    ("twisted (transport, reactor)", re.compile(r"twisted/")),
    ("daphne", re.compile(r"daphne/")),
    ("websockets library", re.compile(r"websockets/")),
    ("channels consumer and asgiref", re.compile(r"channels/|asgiref/")),
    ("json encoding (msgspec, json)", re.compile(r"msgspec|json/")),
    ("QIM: rooms", re.compile(r"\(rooms/")),
    ("QIM: reactions", re.compile(r"\(reactions/")),
    ("QIM: gateway, frames, actions", re.compile(r"\(qim/")),
    ("django (other)", re.compile(r"django/")),
    ("benchmark baseline code", re.compile(r"\(bench/|raw_ws\.py|tutorial_room\.py")),
]


def available() -> bool:
    return shutil.which("py-spy") is not None or Path(__import__("sys").executable).with_name("py-spy").exists()


def _py_spy() -> str:
    local = Path(__import__("sys").executable).with_name("py-spy")
    return str(local) if local.exists() else "py-spy"


class Sampler:
    """`py-spy record` on one process for `seconds`, in the background, raw stacks to `out`."""

    def __init__(self, pid: int, seconds: float, out: Path, rate: int = 100) -> None:
        self.out = out
        self.process = subprocess.Popen(
            [_py_spy(), "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
             "--rate", str(rate), "--format", "raw", "--nonblocking", "--threads", "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def wait(self, timeout: float = 60.0) -> Path | None:
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        return self.out if self.out.exists() else None


def _stacks(path: Path):  # type: ignore[no-untyped-def]
    """(thread kind, frames outermost first, samples) per line of py-spy's raw output."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = "main"
        if frames[0].startswith("thread ("):
            # --threads puts "thread (TID): NAME" first; executor threads are asyncio_N.
            thread = "main" if frames[0].endswith("MainThread") else "executor threads"
            frames = frames[1:]
        if frames:
            yield thread, frames, int(count)


def layer_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        if GENERIC.search(frame):
            continue
        for name, pattern in LAYERS:
            if pattern.search(frame):
                return name
        return "other"
    return "event loop, threads (asyncio itself)"


def summarize(path: Path, top: int = 25) -> dict:
    """Shares of samples by layer, and the heaviest functions (inclusive and self)."""
    layers: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    idle = total = 0
    for thread, frames, count in _stacks(path):
        total += count
        if frames and re.search(r"\(selectors\.py|select \(|epoll|_worker \(concurrent|wait \(threading", frames[-1]):
            idle += count  # waiting in the selector, or an idle executor thread
            continue
        threads[thread] += count
        layers[layer_of(frames)] += count
        own[frames[-1]] += count
        for name in {re.sub(r":\d+\)$", ")", f) for f in frames}:
            inclusive[name] += count
    busy = max(1, total - idle)
    return {
        "samples": total, "busy_samples": total - idle,
        "threads_pct_of_busy": {k: round(100 * v / busy, 1) for k, v in threads.most_common()},
        "layers_pct_of_busy": {k: round(100 * v / busy, 1) for k, v in layers.most_common()},
        "inclusive_pct_of_busy": {k: round(100 * v / busy, 1) for k, v in inclusive.most_common(top)},
        "self_pct_of_busy": {k: round(100 * v / busy, 1) for k, v in own.most_common(top)},
    }


def print_summary(title: str, summary: dict) -> None:
    print(f"\n{title}: {summary['busy_samples']} busy of {summary['samples']} samples")
    print("  by thread: " + ", ".join(f"{k} {v}%" for k, v in summary["threads_pct_of_busy"].items()))
    print("  by layer (innermost frame that matches):")
    for name, pct in summary["layers_pct_of_busy"].items():
        print(f"    {pct:5.1f}%  {name}")
    print("  heaviest, inclusive:")
    for name, pct in list(summary["inclusive_pct_of_busy"].items()):
        print(f"    {pct:5.1f}%  {name}")
    print("  heaviest, self:")
    for name, pct in list(summary["self_pct_of_busy"].items()):
        print(f"    {pct:5.1f}%  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("file", type=Path)
    s.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    print_summary(str(args.file), summarize(args.file, args.top))


if __name__ == "__main__":
    main()
