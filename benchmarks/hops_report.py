"""The hops benchmark's results: one ``HopRun`` per path, session count and round; the medians and
ratios over rounds (``summarize``), the table (``table``) and the plot (``plot``).

``benchmarks/hops.py`` runs the paths and fills ``HopRun`` rows; this module only reads them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOP_PATHS = ["direct", "relay", "asgi", "owner", "fwd", "svc2", "svc3"]
CONTROL_PATHS = ("direct", "relay", "asgi")  # plain HTTP to the upstream; no bridge replica on the path
LABELS = {
    "direct": "direct HTTP (reference)",
    "relay": "direct HTTP through a byte relay (control)",
    "asgi": "direct HTTP through the bridge's HTTP stack (control)",
    "owner": "bridge, straight to the owner",
    "fwd": "bridge, via a non-owner (all forwarded)",
    "svc2": "bridge, 2 replicas round robin",
    "svc3": "bridge, 3 replicas round robin",
}


@dataclass
class HopRun:
    path: str
    sessions: int
    round: int
    calls: int
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_call: dict[str, float]  # process name -> CPU ms per call in the timed window
    client_cpu_ms_per_call: float
    loadavg: float


def _bridge_cpu(run: HopRun) -> float:
    return sum(v for k, v in run.cpu_ms_per_call.items() if k != "upstream")


def summarize(runs: list[HopRun]) -> list[dict[str, Any]]:
    """Per (sessions, path): medians over rounds of calls/s, the ratio to direct and to the owner in
    the same round, p50/p99 and their excess over direct, CPU per call per process; for forwarded
    paths the extra bridge CPU per call over the owner path's (all replicas together)."""
    out = []
    for sessions in sorted({r.sessions for r in runs}):
        level = [r for r in runs if r.sessions == sessions]
        by = {(r.path, r.round): r for r in level}
        names = list(
            dict.fromkeys(
                [*(p for p in HOP_PATHS if any(r.path == p for r in level)), *(r.path for r in level)]
            )
        )
        for path in names:
            base, _, tag = path.partition("@")  # "fwd@before": the fwd path on the compared checkout
            owner = f"owner@{tag}" if tag else "owner"
            mine = [r for r in level if r.path == path]
            pairs_direct = [(r, by[("direct", r.round)]) for r in mine if ("direct", r.round) in by]
            pairs_owner = [(r, by[(owner, r.round)]) for r in mine if (owner, r.round) in by]
            procs = sorted({k for r in mine for k in r.cpu_ms_per_call})
            row: dict[str, Any] = {
                "sessions": sessions,
                "path": path,
                "label": LABELS[base] + (f" [{tag}]" if tag else ""),
                "rounds": len(mine),
                "calls_per_s": statistics.median(r.calls_per_s for r in mine),
                "ratio_direct": statistics.median(r.calls_per_s / d.calls_per_s for r, d in pairs_direct),
                "ratio_owner": statistics.median(r.calls_per_s / o.calls_per_s for r, o in pairs_owner)
                if pairs_owner and base not in CONTROL_PATHS
                else None,
                "p50_ms": statistics.median(r.p50_ms for r in mine),
                "p99_ms": statistics.median(r.p99_ms for r in mine),
                "added_p50_ms": statistics.median(r.p50_ms - d.p50_ms for r, d in pairs_direct),
                "added_p99_ms": statistics.median(r.p99_ms - d.p99_ms for r, d in pairs_direct),
                "cpu_ms_per_call": {
                    k: statistics.median(r.cpu_ms_per_call.get(k, 0.0) for r in mine) for k in procs
                },
                "bridge_cpu_ms_per_call": statistics.median(_bridge_cpu(r) for r in mine),
                "client_cpu_ms_per_call": statistics.median(r.client_cpu_ms_per_call for r in mine),
                "extra_bridge_cpu_ms_per_call": statistics.median(
                    _bridge_cpu(r) - _bridge_cpu(o) for r, o in pairs_owner
                )
                if pairs_owner and base not in (*CONTROL_PATHS, "owner")
                else None,
                "loadavg": [min(r.loadavg for r in mine), max(r.loadavg for r in mine)],
            }
            out.append(row)
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'sessions':>8} {'path':<52} {'calls/s':>8} {'/direct':>7} {'/owner':>7} {'p50 ms':>7} {'+p50':>6} "
        f"{'+p99':>6} {'bridge CPU':>10} {'extra':>6} {'upstr CPU':>9} {'load':>9}"
    )
    lines = [
        "synchronous keep-alive client (http.client), medians over interleaved rounds; CPU in ms per call",
        head,
        "-" * len(head),
    ]
    for row in rows:
        lines.append(
            f"{row['sessions']:>8} {row['label']:<52} {row['calls_per_s']:8.0f} {row['ratio_direct']:7.2f} "
            f"{_fmt(row['ratio_owner'], '.2f'):>7} {row['p50_ms']:7.3f} {row['added_p50_ms']:6.3f} "
            f"{row['added_p99_ms']:6.3f} {row['bridge_cpu_ms_per_call'] if row['path'] != 'direct' else 0:10.3f} "
            f"{_fmt(row['extra_bridge_cpu_ms_per_call'], '.3f'):>6} {row['cpu_ms_per_call']['upstream']:9.3f} "
            f"{row['loadavg'][0]:4.1f}-{row['loadavg'][1]:<4.1f}"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> str | None:
    """Grouped bars: each path's throughput as a ratio to direct HTTP, per session count; and each
    path's bridge CPU per call (all replicas) beside the upstream's."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (make setup installs the dev group)"
    levels = sorted({r["sessions"] for r in rows})
    paths = list(dict.fromkeys(r["path"] for r in rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=120)
    width = 0.8 / len(levels)
    for i, sessions in enumerate(levels):
        found = {r["path"]: r for r in rows if r["sessions"] == sessions}
        xs = [j + i * width for j in range(len(paths))]
        left.bar(
            xs,
            [found[p]["ratio_direct"] if p in found else 0 for p in paths],
            width,
            label=f"{sessions} sessions",
        )
        right.bar(
            xs,
            [found[p]["bridge_cpu_ms_per_call"] if p in found and p != "direct" else 0 for p in paths],
            width,
            label=f"{sessions} sessions",
        )
    for ax in (left, right):
        ax.set_xticks(
            [j + width * (len(levels) - 1) / 2 for j in range(len(paths))], paths, rotation=30, ha="right"
        )
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    left.axhline(0.85, color="grey", linestyle="--", linewidth=1)
    left.set_ylabel("calls/s ÷ direct HTTP, same round")
    left.set_title("Throughput, synchronous client")
    right.set_ylabel("bridge CPU ms per call (all replicas)")
    right.set_title("Bridge CPU per call")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return None
