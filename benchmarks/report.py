"""Reporting for ``benchmarks.run``: percentiles and medians, the forwarding cost per workload, the
text table, the concurrency plot, and the machine the run was on."""

from __future__ import annotations

import os
import platform
import statistics
from pathlib import Path
from typing import Any

from benchmarks.calls import PATHS, SWEEP_PATHS, RunResult, Summary


def forwarding_cost(results: list[RunResult]) -> list[dict[str, Any]]:
    """``bridge-fwd`` against ``bridge`` per workload: medians over repeats of the per-repeat
    differences (both paths ran in each repeat, interleaved)."""
    out = []
    for workload in ("sequential", "concurrent"):
        owner = {r.repeat: r for r in results if r.workload == workload and r.path == "bridge"}
        via = {r.repeat: r for r in results if r.workload == workload and r.path == "bridge-fwd"}
        repeats = sorted(owner.keys() & via.keys())
        if not repeats:
            continue
        pairs = [(owner[i], via[i]) for i in repeats]
        out.append(
            {
                "workload": workload,
                "repeats": len(pairs),
                "owner_calls_per_s": statistics.median(o.calls_per_s for o, _ in pairs),
                "forwarded_calls_per_s": statistics.median(v.calls_per_s for _, v in pairs),
                "ratio": statistics.median(v.calls_per_s / o.calls_per_s for o, v in pairs),
                "added_p50_ms": statistics.median(v.p50_ms - o.p50_ms for o, v in pairs),
                "added_p99_ms": statistics.median(v.p99_ms - o.p99_ms for o, v in pairs),
                "added_bridge_cpu_ms_per_call": statistics.median(
                    (v.bridge_cpu_ms_per_call or 0.0) - (o.bridge_cpu_ms_per_call or 0.0) for o, v in pairs
                ),
            }
        )
    return out


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(summaries: list[Summary], title: str) -> str:
    head = (
        f"{'path':<50} {'calls/s':>8} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} {'+p50':>6} "
        f"{'bridge CPU':>10} {'upstr CPU':>9} {'bridge RSS':>10} {'ok':>3}"
    )
    unit = f"{'':<50} {'':>8} {'':>6} {'':>7} {'':>7} {'ms':>6} {'ms/call':>10} {'ms/call':>9} {'MB':>10} {'':>3}"
    lines = [title, head, unit, "-" * len(head)]
    for s in summaries:
        ratio = fmt(s.ratio, ".2f")
        if s.ratio_own is not None:
            ratio += f" ({s.ratio_own:.2f} own)"
        lines.append(
            f"{s.label:<50} {s.calls_per_s:8.0f} {ratio:>6} {s.p50_ms:7.2f} {s.p99_ms:7.2f} "
            f"{fmt(s.added_p50_ms, '.2f'):>6} {fmt(s.bridge_cpu_ms_per_call, '.3f'):>10} "
            f"{fmt(s.upstream_cpu_ms_per_call, '.3f'):>9} {fmt(s.bridge_rss_mb, '.0f'):>10} "
            f"{'yes' if s.correct else 'NO':>3}"
        )
    return "\n".join(lines)


def plot(sweep: list[RunResult], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (make setup installs the dev group)"
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for name in SWEEP_PATHS:
        points: dict[int, list[float]] = {}
        for r in sweep:
            if r.path == name:
                points.setdefault(r.sessions, []).append(r.calls_per_s)
        if points:
            xs = sorted(points)
            ax.plot(xs, [statistics.median(points[x]) for x in xs], marker="o", label=PATHS[name][0])
    ax.set_xscale("log", base=2)
    xs_all = sorted({r.sessions for r in sweep})
    ax.set_xticks(xs_all, [str(x) for x in xs_all])
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("increment_counter calls/s")
    ax.set_title("Throughput vs concurrency (median of interleaved repeats)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return None


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": os.getloadavg(),
    }
