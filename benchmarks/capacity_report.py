"""The capacity benchmark's results: per-path medians over rounds, paired ratios within a round with a
bootstrap 95 % interval (``summarize``), CPU per KB, the targets, the table (``render``) and the plot
(``plot``).

``benchmarks/capacity.py`` runs the paths and writes one run dict per (workload, sessions, path,
round); this module only reads them.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Which processes do a path's work (the first is "the process under test" of the path).
PATH_PROCS = {
    "direct": [],
    "nginx": ["nginx"],
    "relay": ["relay"],
    "splice": ["splice"],
    "asgi": ["asgi"],
    "rest": ["owner"],
    "mcp": ["owner"],
    "fwd": ["peer", "owner"],
    "fwd-splice": ["fwd-splice", "owner"],
}
LABELS = {
    "direct": "direct to the bare upstream",
    "nginx": "nginx keep-alive proxy (floor)",
    "relay": "Python byte relay (floor)",
    "splice": "Python relay below ASGI (floor)",
    "asgi": "bridge HTTP stack, no MCP work",
    "rest": "bridge REST POST /<tool>",
    "mcp": "bridge MCP tools/call (owner)",
    "fwd": "bridge MCP via non-owner (fwd)",
    "fwd-splice": "non-owner checks below ASGI (floor)",
}
FORWARDED = ("fwd", "fwd-splice")  # paths through a process in front of the owner
RESAMPLES = 2000


def procs_of(path: str) -> list[str]:
    """The processes doing ``path``'s work; ``mcp@base`` is ``mcp`` on the baseline's replicas."""
    kind, at, base = path.partition("@")
    return [f"{p}{at}{base}" for p in PATH_PROCS[kind]]


def label_of(path: str) -> str:
    kind, at, _ = path.partition("@")
    return f"baseline {LABELS[kind].removeprefix('bridge ')}" if at else LABELS[kind]


def _order(path: str) -> tuple[int, bool]:
    kind, at, _ = path.partition("@")
    return list(PATH_PROCS).index(kind), bool(at)


def bootstrap(values: list[float], rng: random.Random) -> tuple[float, float, float] | None:
    """(median, low, high): the median and a percentile-bootstrap 95 % interval of the median."""
    if not values:
        return None
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(RESAMPLES))
    return statistics.median(values), medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]


def _paired(
    mine: list[dict[str, Any]],
    other: dict[int, dict[str, Any]],
    f: Callable[[Any, Any], float],
    rng: random.Random,
) -> tuple[float, float, float] | None:
    return bootstrap([f(r, other[r["round"]]) for r in mine if r["round"] in other], rng)


def summarize(runs: list[dict[str, Any]], seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    cpu_rng = random.Random(seed + 1)  # its own stream: the ratios' intervals stay as they were
    baseline_rng = random.Random(seed + 2)
    out: list[dict[str, Any]] = []
    keys = sorted({(r["workload"], r["sessions"]) for r in runs}, key=lambda k: (k[0] != "16B", k[1]))
    for workload, sessions in keys:
        level = [r for r in runs if r["workload"] == workload and r["sessions"] == sessions]
        by_path: dict[str, dict[int, dict[str, Any]]] = {p: {} for p in PATH_PROCS}
        for r in level:
            by_path.setdefault(r["path"], {})[r["round"]] = r
        for path in sorted((p for p, found in by_path.items() if found), key=_order):
            mine, procs = list(by_path[path].values()), procs_of(path)
            kind = path.partition("@")[0]
            suffix = path[len(kind) :]

            def cpu(name: str, runs_: list[dict[str, Any]] = mine) -> float:
                return statistics.median(r["cpu_ms_per_call"].get(name, 0.0) for r in runs_)

            server = cpu(procs[0]) if procs else None
            total = sum(cpu(p) for p in procs) if procs else None
            row: dict[str, Any] = {
                "workload": workload,
                "sessions": sessions,
                "path": path,
                "label": label_of(path),
                "rounds": len(mine),
                "calls_per_s": statistics.median(r["calls_per_s"] for r in mine),
                "p50_ms": statistics.median(r["p50_ms"] for r in mine),
                "p99_ms": statistics.median(r["p99_ms"] for r in mine),
                "server_cpu_ms_per_call": server,
                "server_cpu_ci": bootstrap([r["cpu_ms_per_call"].get(procs[0], 0.0) for r in mine], cpu_rng)
                if procs
                else None,
                "all_bridge_cpu_ms_per_call": total if kind in FORWARDED else None,
                "calls_per_s_per_server_core": 1e3 / server if server else None,
                "cpu_ms_per_call": {p: cpu(p) for p in [*procs, "upstream", "client"]},
                "server_busy": statistics.median(r["busy"].get(procs[0], 0.0) for r in mine)
                if procs
                else None,
                "client_busy": statistics.median(r["busy"]["client"] for r in mine),
                "upstream_busy": statistics.median(r["busy"]["upstream"] for r in mine),
                "saturated_rounds": sum(1 for r in mine if r["saturated"]),
                "saturated": sorted({s for r in mine for s in r["saturated"]}),
                "ratio_nginx": None,
                "ratio_owner": None,
                "ratio_baseline_cpu": None,
                "added_p99_ms_over_nginx": None,
                "added_p99_ms_over_direct": _paired(
                    mine, by_path["direct"], lambda a, b: a["p99_ms"] - b["p99_ms"], rng
                )
                if path != "direct"
                else None,
                "loadavg": [min(r["loadavg"] for r in mine), max(r["loadavg"] for r in mine)],
            }
            if path not in ("direct", "nginx"):
                row["ratio_nginx"] = _paired(
                    mine, by_path["nginx"], lambda a, b: a["calls_per_s"] / b["calls_per_s"], rng
                )
                row["added_p99_ms_over_nginx"] = _paired(
                    mine, by_path["nginx"], lambda a, b: a["p99_ms"] - b["p99_ms"], rng
                )
            if kind in FORWARDED:
                row["ratio_owner"] = _paired(
                    mine,
                    by_path.get(f"mcp{suffix}", {}),
                    lambda a, b: a["calls_per_s"] / b["calls_per_s"],
                    rng,
                )
            if by_path.get(f"{path}@base") and procs:
                me = procs[0]

                def against(a: dict[str, Any], b: dict[str, Any], me: str = me) -> float:
                    return float(a["cpu_ms_per_call"][me] / b["cpu_ms_per_call"][f"{me}@base"])

                row["ratio_baseline_cpu"] = _paired(mine, by_path[f"{path}@base"], against, baseline_rng)
            out.append(row)
    small = {(r["sessions"], r["path"]): r for r in out if r["workload"] == "16B"}
    for row in out:  # CPU per KB: the 64 KiB workload's extra CPU over the 16-byte one, same sessions
        base = small.get((row["sessions"], row["path"]))
        row["us_per_kb"] = None
        if row["workload"] == "64KB" and base is not None:
            row["us_per_kb"] = {
                p: (row["cpu_ms_per_call"][p] - base["cpu_ms_per_call"][p]) / 64 * 1e3
                for p in row["cpu_ms_per_call"]
            }
    return out


def _ci(value: tuple[float, float, float] | None, spec: str = ".2f") -> str:
    if value is None:
        return "-"
    return f"{value[0]:{spec}} [{value[1]:{spec}},{value[2]:{spec}}]"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for the targets the figures are reported against (none is asserted)."""
    get = {(r["workload"], r["sessions"], r["path"]): r for r in rows}
    out: list[tuple[str, str, bool | None]] = []
    for sessions in sorted({r["sessions"] for r in rows if r["workload"] == "16B"}):
        mcp, fwd = get.get(("16B", sessions, "mcp")), get.get(("16B", sessions, "fwd"))
        for row, what, bound in ((mcp, "bridge CPU", 0.25), (fwd, "non-owner CPU", 0.15)):
            if row:
                cpu = row["server_cpu_ms_per_call"]
                call = "MCP tools/call" if row is mcp else "forwarded call"
                target = f"{what} <= {bound} ms per {call}, {sessions} sessions"
                out.append((target, _ci(row["server_cpu_ci"], ".3f") + " ms", cpu <= bound))
        if fwd and fwd["ratio_owner"]:
            ratio = fwd["ratio_owner"]
            out.append((f"forwarded >= 0.9 of owner, {sessions} sessions", _ci(ratio), ratio[0] >= 0.9))
    mcp1 = get.get(("16B", 1, "mcp"))
    if mcp1 and mcp1["ratio_nginx"]:
        out.append(
            (
                "owner >= 0.9 of nginx sequentially (1 session)",
                _ci(mcp1["ratio_nginx"]),
                mcp1["ratio_nginx"][0] >= 0.9,
            )
        )
    mcp256 = get.get(("16B", 256, "mcp"))
    if mcp256 and mcp256["added_p99_ms_over_nginx"]:
        added = mcp256["added_p99_ms_over_nginx"]
        out.append(
            ("p99 added <= 1 ms at 256 sessions (MCP owner over nginx)", _ci(added) + " ms", added[0] <= 1.0)
        )
    return out


def floors(rows: list[dict[str, Any]]) -> list[str]:
    """What the same rounds say is reachable at all, with a Python relay doing no MCP work in the
    bridge's place -- below any ASGI cycle (``splice``) or on the bridge's HTTP stack (``asgi``) --
    or nginx. Forwarded ÷ owner: both replicas share one core, so it is at most owner CPU ÷ (owner
    CPU + non-owner CPU)."""
    get = {(r["workload"], r["sessions"], r["path"]): r for r in rows}
    out: list[str] = []
    stacks = [("splice", "below ASGI (splice)"), ("asgi", "the HTTP stack alone (asgi)")]
    ratios = [
        f"{name} gets {_ci(row['ratio_nginx'])}" for p, name in stacks if (row := get.get(("16B", 1, p)))
    ]
    if ratios:
        out.append("owner ÷ nginx, 1 session: " + "; ".join(ratios))
    for sessions in sorted({r["sessions"] for r in rows if r["workload"] == "16B"}):
        mcp, nginx = get.get(("16B", sessions, "mcp")), get.get(("16B", sessions, "nginx"))
        here = [
            (p, get[("16B", sessions, p)]["server_cpu_ms_per_call"])
            for p in ("fwd-splice", *(p for p, _ in stacks))
            if ("16B", sessions, p) in get
        ]
        if not (mcp and nginx and here):
            continue
        owner = mcp["server_cpu_ms_per_call"]
        cpu = ", ".join(f"{p} {ms:.3f}" for p, ms in here)
        with_nginx = [*here, ("nginx", nginx["server_cpu_ms_per_call"])]
        bound = ", ".join(f"{owner / (owner + ms):.2f} with {p}" for p, ms in with_nginx)
        out.append(f"{sessions:>3} sessions: non-owner CPU at least {cpu} ms; fwd ÷ owner at most {bound}")
    added = [
        f"{p} adds {_ci(row['added_p99_ms_over_nginx'])} ms"
        for p, _ in stacks
        if (row := get.get(("16B", 256, p))) and row["added_p99_ms_over_nginx"]
    ]
    if added:
        out.append("p99 added over nginx at 256 sessions: " + "; ".join(added))
    return out


def render(report: dict[str, Any]) -> str:
    rows, machine = report["summary"], report["machine"]
    kernel = f", Linux {machine['kernel']}" if machine.get("kernel") else ""
    load0, load1 = report["loadavg_at_start"], report["loadavg_at_end"]
    lines = [
        f"gym-mcp-bridge capacity, {report['when_utc'][:16]} UTC, {machine['cpu']} x{machine['cores']}{kernel}, "
        f"{machine['nginx']}; load avg at start {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, "
        f"at end {load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}",
        "bridge replicas and nginx on core 1; bare upstream and client on core 0. Medians over interleaved rounds;",
        "[a,b] = bootstrap 95 % interval of the median of per-round ratios; CPU in ms per call of the process under",
        "test (fwd: the non-owner; +owner beside it); /core = 1000 / that CPU; srv, cli, ups = share of a core used by",
        "the process under test, the client, the upstream (srv < 1 at many sessions: other jobs took core 1); ! = rounds",
        "where client or upstream (core 0) was saturated (>= 90 % of a core): those rounds measured core 0.",
    ]
    head = (
        f"{'load':<4} {'sess':>4} {'path':<32} {'calls/s':>7} {'/core':>6} {'CPU ms':>6} {'+owner':>6} {'p50':>6} {'p99':>7} "
        f"{'÷ nginx [95%]':>18} {'fwd÷owner [95%]':>18} {'p99+ vs nginx':>20} {'srv':>4} {'cli':>4} {'ups':>4} {'!':>2}"
    )
    lines += [head, "-" * len(head)]
    for row in rows:
        procs = procs_of(row["path"])
        owner = row["cpu_ms_per_call"][procs[1]] if len(procs) > 1 else None
        lines.append(
            f"{row['workload']:<4} {row['sessions']:>4} {row['label']:<32} {row['calls_per_s']:7.0f} "
            f"{_num(row['calls_per_s_per_server_core'], '6.0f'):>6} {_num(row['server_cpu_ms_per_call'], '6.3f'):>6} "
            f"{_num(owner, '6.3f'):>6} {row['p50_ms']:6.2f} {row['p99_ms']:7.2f} "
            f"{_ci(row['ratio_nginx']):>18} {_ci(row['ratio_owner']):>18} {_ci(row['added_p99_ms_over_nginx']):>20} "
            f"{_num(row['server_busy'], '4.2f'):>4} {row['client_busy']:4.2f} {row['upstream_busy']:4.2f} {row['saturated_rounds'] or '':>2}"
        )
    per_kb = [r for r in rows if r["us_per_kb"]]
    if per_kb:
        lines += [
            "",
            "CPU per KB (64 KiB argument + 64 KiB answer over the 16-byte call, same sessions), µs per KB:",
        ]
        for row in per_kb:
            procs = procs_of(row["path"]) or ["upstream"]
            lines.append(
                f"  {row['sessions']:>3} sessions {row['label']:<32} "
                + ", ".join(f"{p} {row['us_per_kb'][p]:.2f}" for p in [*procs, "client"])
            )
    against = [r for r in rows if r.get("ratio_baseline_cpu")]
    if against:
        lines += [
            "",
            f"against the baseline {report.get('baseline')}: CPU per call of the process under test ÷ the",
            "baseline's on the same path, same rounds (< 1: this checkout costs less):",
        ]
        for row in against:
            lines.append(
                f"  {row['workload']:<4} {row['sessions']:>4} sessions {row['label']:<32} {_ci(row['ratio_baseline_cpu'], '.3f')}"
            )
    checks = targets(rows)
    if checks:
        lines += ["", "targets (reported, not asserted):"]
        for name, measured, met in checks:
            lines.append(f"  {name:<66} {measured:<24} {'met' if met else 'NOT met'}")
    reachable = floors(rows)
    if reachable:
        lines += [
            "",
            "floors, same rounds (a Python relay with no MCP work: splice = HTTP parsed below ASGI, asgi = the bridge's",
            "HTTP stack; fwd-splice = splice making the non-owner's checks; fwd ÷ owner: both replicas on one core, so at",
            "most owner CPU ÷ (owner CPU + non-owner CPU)):",
            *(f"  {line}" for line in reachable),
        ]
    lines.append("")
    lines.append(
        "correctness: every answer checked, every counter read back exact after each run"
        if report["correct"]
        else f"correctness: FAILED: {report['error']}"
    )
    return "\n".join(lines)


PLOTTED = ["nginx", "relay", "splice", "asgi", "rest", "mcp", "fwd", "fwd-splice"]


def plot(rows: list[dict[str, Any]], path: Path) -> str | None:
    """The 16-byte workload against sessions, each point a median over rounds with its bootstrap 95 %
    interval: CPU per call of the process under test, calls/s ÷ nginx in the same round, and p99.
    None when written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (make setup installs the dev group)"
    small = [r for r in rows if r["workload"] == "16B"]
    levels = sorted({r["sessions"] for r in small})
    if not small:
        return "no 16-byte rows to plot"
    fig, (cpu, ratio, tail) = plt.subplots(1, 3, figsize=(15, 5.2), dpi=120)
    xs = range(len(levels))
    for color, name in enumerate(PLOTTED):
        style = {"marker": "o", "color": f"C{color}", "label": LABELS[name]}
        found = {r["sessions"]: r for r in small if r["path"] == name}
        if not found:
            continue
        at = [i for i, n in enumerate(levels) if n in found]
        points = [found[levels[i]] for i in at]
        cis = [r["server_cpu_ci"] or (r["server_cpu_ms_per_call"],) * 3 for r in points]
        cpu.errorbar(at, *_bars(cis), capsize=3, **style)
        against = [(i, r["ratio_nginx"]) for i, r in zip(at, points, strict=True) if r["ratio_nginx"]]
        if name != "nginx" and against:  # no ratio in a run without nginx
            ratio.errorbar([i for i, _ in against], *_bars([c for _, c in against]), capsize=3, **style)
        tail.plot(at, [r["p99_ms"] for r in points], **style)
    cpu.axhline(0.25, color="grey", linestyle="--", linewidth=1)
    cpu.axhline(0.15, color="grey", linestyle=":", linewidth=1)
    cpu.set_ylabel("CPU ms per call, process under test\n(target: -- MCP owner 0.25, ·· non-owner 0.15)")
    cpu.set_title("CPU per call (fwd: the non-owner)")
    ratio.axhline(0.9, color="grey", linestyle="--", linewidth=1)
    ratio.set_ylabel("calls/s ÷ nginx, same round (target -- 0.9)")
    ratio.set_title("Throughput against nginx")
    tail.set_yscale("log")
    tail.set_ylabel("p99 ms (log)")
    tail.set_title("p99 latency, closed loop")
    for ax in (cpu, ratio, tail):
        ax.set_xticks(list(xs), [str(n) for n in levels])
        ax.set_xlabel("concurrent sessions (one call in flight each)")
        ax.grid(True, alpha=0.3)
    cpu.set_ylim(bottom=0)
    ratio.set_ylim(bottom=0)
    handles, labels = cpu.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return None


def _bars(cis: list[Any]) -> tuple[list[float], list[list[float]]]:
    """Medians and matplotlib's asymmetric error bars from (median, low, high) triples."""
    medians = [c[0] for c in cis]
    return medians, [[c[0] - c[1] for c in cis], [c[2] - c[0] for c in cis]]
