"""The PNG per scenario that `make bench` writes beside its report (bench/run_all.py): one
function per scenario, drawn from the scenario's JSON line; a plot never fails the run."""

from __future__ import annotations

from pathlib import Path


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
    raw = next((r["kib_per_connection"] for r in rows if r["server"] == "raw_websockets"), None)
    if raw:  # the issue 22 target: 1.5x raw websockets' KiB per connection
        axes[0].axhline(1.5 * raw, color="red", linewidth=0.8, linestyle="--")
    _bars(axes[1], [r["server"] for r in rows], [r["connect_s"] for r in rows], "seconds to connect all", "s")


def plot_reconnect_storm(result: dict, fig) -> None:  # type: ignore[no-untyped-def]
    rows = result["cases"]
    axes = fig.subplots(1, 2)
    _bars(axes[0], [r["server"] for r in rows], [r["per_s"] for r in rows],
          f"{result['clients']} clients at once: (re)connects/s", "per s")
    _bars(axes[1], [r["server"] for r in rows], [r["p99_ms"] for r in rows], "p99 time to caught-up, ms", "ms")


PLOTS = {"room_fanout": plot_room_fanout, "dm_isolation": plot_dm_isolation, "reaction_storm": plot_reaction_storm,
         "send_fanout": plot_send_fanout, "connections": plot_connections, "reconnect_storm": plot_reconnect_storm}


def plot(name: str, result: dict, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if name not in PLOTS:  # a scenario whose table says it all (push_senders)
        return False
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
