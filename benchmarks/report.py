"""The one report module of every benchmark: the machine and load of a run, medians with bootstrap
95 % intervals (scipy), tables (tabulate), plots (matplotlib), the JSON a run writes. Each benchmark
hands its raw runs here; ``summarize_*`` turn them into rows, ``targets`` gives each target one
status, ``render_*`` is the text a benchmark prints. Nothing here runs anything."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from scipy import stats
from tabulate import tabulate

Interval = tuple[float, float, float]  # (median, low, high)
PROCS = {"direct": [], "nginx": ["nginx"], "asgi": ["asgi"], "rest": ["owner"], "mcp": ["owner"], "fwd": ["peer", "owner"]}  # fmt: skip
LABELS = {
    "direct": "direct to the bare upstream",
    "nginx": "nginx keep-alive proxy (floor)",
    "asgi": "bridge HTTP stack, no MCP work (floor)",
    "rest": "bridge REST POST /<tool>",
    "mcp": "bridge MCP tools/call (owner)",
    "fwd": "bridge MCP via a non-owner",
}
OUTCOMES = ("exact", "wrong", "refused", "error")
SKIPPED = ("_bucket", "_count", "_sum", "_created")  # of /metrics: histograms' parts, creation times


# -- the run's context and its JSON -------------------------------------------------------------------


def machine() -> dict[str, Any]:
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]  # fmt: skip
    cpu = names[0] if names else platform.processor() or "unknown"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
        "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": sys.version.split()[0], "loadavg_at_start": os.getloadavg(),
    }  # fmt: skip


def header(question: str, argv: list[str]) -> dict[str, Any]:
    return {
        "question": question,
        "when_utc": dt.datetime.now(dt.UTC).isoformat(),
        "command": f'make bench ARGS="{" ".join([question, *argv])}"',
        "machine": machine(),
    }


def title(report: dict[str, Any]) -> str:
    info, end = report["machine"], report.get("loadavg_at_end") or os.getloadavg()
    return (
        f"gym-mcp-bridge {report.get('question') or report.get('mode')}, {report['when_utc'][:16].replace('T', ' ')} UTC, "
        f"{info['cpu']} x{info['cores']}, load avg {info['loadavg_at_start'][0]:.2f} at start, {end[0]:.2f} at end"
    )


def save(report: dict[str, Any], path: Path | None) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2))
        print(f"json: {path}")


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


# -- statistics -------------------------------------------------------------------------------------------


def bootstrap(values: list[float]) -> Interval | None:
    """The median and a percentile-bootstrap 95 % interval of it (seeded: the same runs, the same
    interval); with fewer than three values, or all alike, the interval is their range."""
    if not values:
        return None
    median = float(np.median(values))
    if len(values) < 3 or min(values) == max(values):
        return median, float(min(values)), float(max(values))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = stats.bootstrap(
            (values,), np.median, method="percentile", n_resamples=2000, random_state=1
        ).confidence_interval
    return median, float(ci.low), float(ci.high)


def _paired(
    mine: list[dict[str, Any]], other: dict[int, dict[str, Any]], f: Callable[[Any, Any], float]
) -> Interval | None:
    return bootstrap([f(r, other[r["round"]]) for r in mine if r["round"] in other]) if other else None


def _ci(value: Interval | None, spec: str = ".2f") -> str:
    return "-" if value is None else f"{value[0]:{spec}} [{value[1]:{spec}}, {value[2]:{spec}}]"


# -- per-call cost and forwarding ---------------------------------------------------------------------------


def summarize_calls(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload, sessions, path): medians over rounds, the process under test's CPU per
    call with its interval, ratios to nginx and to the owner paired within a round."""
    out: list[dict[str, Any]] = []
    for workload, sessions in sorted(
        {(r["workload"], r["sessions"]) for r in runs}, key=lambda k: (k[0] != "16B", k[1])
    ):
        here = [r for r in runs if r["workload"] == workload and r["sessions"] == sessions]
        by_path = {p: {r["round"]: r for r in here if r["path"] == p} for p in PROCS}
        for path in [p for p in PROCS if by_path[p]]:
            mine, procs = list(by_path[path].values()), PROCS[path]

            def cpu(name: str, mine: list[dict[str, Any]] = mine) -> float:
                return float(np.median([r["cpu_ms_per_call"].get(name, 0.0) for r in mine]))

            server = cpu(procs[0]) if procs else None
            row: dict[str, Any] = {
                "workload": workload, "sessions": sessions, "path": path, "label": LABELS[path], "rounds": len(mine),
                **{k: float(np.median([r[k] for r in mine])) for k in ("calls_per_s", "p50_ms", "p99_ms")},
                "server_cpu_ms_per_call": server,
                "server_cpu_ci": bootstrap([r["cpu_ms_per_call"].get(procs[0], 0.0) for r in mine]) if procs else None,
                "calls_per_s_per_server_core": 1e3 / server if server else None,
                "cpu_ms_per_call": {p: cpu(p) for p in [*procs, "upstream", "client"]},
                "server_busy": float(np.median([r["busy"].get(procs[0], 0.0) for r in mine])) if procs else None,
                "client_busy": float(np.median([r["busy"]["client"] for r in mine])),
                "upstream_busy": float(np.median([r["busy"]["upstream"] for r in mine])),
                "saturated_rounds": sum(1 for r in mine if r["saturated"]),
                "ratio_nginx": None, "added_p99_ms_over_nginx": None, "ratio_owner": None,
                "added_p50_ms_over_owner": None, "added_p99_ms_over_owner": None,
                "loadavg": [min(r["loadavg"] for r in mine), max(r["loadavg"] for r in mine)],
            }  # fmt: skip
            if path not in ("direct", "nginx"):
                row["ratio_nginx"] = _paired(
                    mine, by_path["nginx"], lambda a, b: a["calls_per_s"] / b["calls_per_s"]
                )
                row["added_p99_ms_over_nginx"] = _paired(
                    mine, by_path["nginx"], lambda a, b: a["p99_ms"] - b["p99_ms"]
                )
            if path == "fwd":
                row["ratio_owner"] = _paired(
                    mine, by_path["mcp"], lambda a, b: a["calls_per_s"] / b["calls_per_s"]
                )
                row["added_p50_ms_over_owner"] = _paired(
                    mine, by_path["mcp"], lambda a, b: a["p50_ms"] - b["p50_ms"]
                )
                row["added_p99_ms_over_owner"] = _paired(
                    mine, by_path["mcp"], lambda a, b: a["p99_ms"] - b["p99_ms"]
                )
            out.append(row)
    small = {(r["sessions"], r["path"]): r for r in out if r["workload"] == "16B"}
    for row in out:  # CPU per KB: the 64 KiB call's CPU over the 16-byte call's, same sessions, per KB
        base = small.get((row["sessions"], row["path"]))
        row["us_per_kb"] = None
        if row["workload"] == "64KB" and base is not None:
            row["us_per_kb"] = {
                p: (v - base["cpu_ms_per_call"][p]) / 64 * 1e3 for p, v in row["cpu_ms_per_call"].items()
            }
    return out


TARGETS = {  # (path, what): (bound, higher is better, the target in words)
    ("mcp", "cpu"): (0.25, False, "bridge CPU <= 0.25 ms per MCP tools/call (owner)"),
    ("fwd", "cpu"): (0.15, False, "non-owner CPU <= 0.15 ms per forwarded call"),
    ("mcp", "nginx"): (0.9, True, "owner >= 0.9 of nginx's calls/s, 1 session"),
    ("fwd", "owner"): (0.9, True, "forwarded >= 0.9 of the owner's calls/s"),
    ("mcp", "p99"): (1.0, False, "p99 added over nginx <= 1 ms, 256 sessions"),
}


def targets(rows: list[dict[str, Any]]) -> list[list[str]]:
    """[target, sessions, measured, status] for each target the rows measure: one status each."""
    out = []
    floors = any(r["path"] == "nginx" for r in rows)  # the per-call run: the owner's targets are its own
    for row in (r for r in rows if r["workload"] == "16B" and (floors or r["path"] != "mcp")):
        measured = {
            "cpu": row["server_cpu_ci"],
            "nginx": row["ratio_nginx"] if row["sessions"] == 1 else None,
            "owner": row["ratio_owner"],
            "p99": row["added_p99_ms_over_nginx"] if row["sessions"] == 256 else None,
        }
        for what, value in measured.items():
            if (row["path"], what) in TARGETS and value is not None:
                bound, higher, words = TARGETS[(row["path"], what)]
                met = value[0] >= bound if higher else value[0] <= bound
                out.append([words, str(row["sessions"]), _ci(value, ".3f"), "met" if met else "not met"])
    return out


def render_calls(report: dict[str, Any]) -> str:
    rows = report["summary"]
    table = [
        [
            r["workload"], r["sessions"], r["label"], f"{r['calls_per_s']:.0f}",
            "-" if r["calls_per_s_per_server_core"] is None else f"{r['calls_per_s_per_server_core']:.0f}",
            _ci(r["server_cpu_ci"], ".3f") + (f" (+{r['cpu_ms_per_call']['owner']:.3f} owner)" if r["path"] == "fwd" else ""),
            f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", _ci(r["ratio_nginx"]), _ci(r["ratio_owner"]),
            _ci(r["added_p99_ms_over_nginx"] or r["added_p99_ms_over_owner"]), r["saturated_rounds"] or "",
        ]
        for r in rows
    ]  # fmt: skip
    heads = ["work", "sess", "path", "calls/s", "per core", "CPU ms/call [95 %]", "p50 ms", "p99 ms",
             "÷ nginx [95 %]", "fwd ÷ owner [95 %]", "p99 added ms [95 %]", "core 0 sat."]  # fmt: skip
    lines = [
        title(report),
        "under test on core 1, bare upstream and client on core 0; medians over interleaved rounds; [a, b] = bootstrap",
        "95 % interval; CPU = the process under test (fwd: the non-owner); per core = 1000 / that CPU; p99 added:",
        "over nginx (fwd: over the owner), same round; core 0 sat. = rounds where client + upstream used >= 90 % of core 0.",
        tabulate(table, heads, tablefmt="github", disable_numparse=True),
    ]
    if checks := targets(rows):
        lines += [
            "",
            "targets (reported, not asserted):",
            tabulate(checks, ["target", "sess", "measured", "status"], tablefmt="github"),
        ]
    ok = "every answer checked, every counter read back exact after each run"
    lines += ["", f"correctness: {ok}" if report["correct"] else f"correctness: FAILED: {report['error']}"]
    return "\n".join(lines)


def plot_calls(rows: list[dict[str, Any]], path: Path | None) -> None:
    """16-byte calls against sessions: CPU per call of the process under test and calls/s ÷ nginx
    (each a median with its 95 % interval), and p99."""
    small = [r for r in rows if r["workload"] == "16B"]
    if not path or not small:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({r["sessions"] for r in small})
    fig, axes = plt.subplots(1, 3, figsize=(15, 5), dpi=110)
    for i, name in enumerate(p for p in PROCS if p != "direct"):
        found = sorted((r for r in small if r["path"] == name), key=lambda r: r["sessions"])
        xs = [levels.index(r["sessions"]) for r in found]
        for ax, key in zip(axes[:2], ("server_cpu_ci", "ratio_nginx"), strict=True):
            if pts := [(x, r[key]) for x, r in zip(xs, found, strict=True) if r[key]]:
                err = [[c[0] - c[1] for _, c in pts], [c[2] - c[0] for _, c in pts]]
                style = {"marker": "o", "capsize": 3, "color": f"C{i}", "label": LABELS[name]}
                ax.errorbar([x for x, _ in pts], [c[0] for _, c in pts], yerr=err, **style)
        axes[2].plot(xs, [r["p99_ms"] for r in found], marker="o", color=f"C{i}")
    labels = ("CPU ms per call, process under test", "calls/s ÷ nginx, same round", "p99 ms (log)")
    for ax, label in zip(axes, labels, strict=True):
        ax.set(xticks=range(len(levels)), xticklabels=levels, ylabel=label)
        ax.set_xlabel("concurrent sessions, one call in flight each")
        ax.grid(True, alpha=0.3)
    axes[2].set_yscale("log")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"plot: {path}")


# -- start-up and footprint -----------------------------------------------------------------------------------


def render_footprint(report: dict[str, Any]) -> str:
    starts, imp, mem = report["restarts"], report["imports"], report["idle"]
    ratio = [s["ready_s"] / s["sdk_server_import_s"] for s in starts]
    rows = [
        ["restart to /readyz 200 (warm upstream)", f"{report['ready_s_median']:.3f} s", " ".join(f"{s['ready_s']:.2f}" for s in starts)],
        ["restart to the first answered tools/call", f"{report['first_answer_s_median']:.3f} s", ""],
        ["floor: the interpreter alone", f"{report['interpreter_s_median']:.3f} s", ""],
        ["floor: Python importing the MCP SDK's server", f"{report['sdk_server_import_s_median']:.3f} s", f"ready / this floor {np.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})"],
        ["floor: nginx restarted to its first proxied answer", f"{report['nginx_ready_s_median']:.3f} s", ""],
        ["imports of serve (-X importtime, one run)", f"{imp['all_ms']:.0f} ms", f"MCP SDK {imp['mcp_sdk_ms']:.0f} ms, the rest {imp['rest_ms']:.0f} ms"],
        [f"idle sessions: {mem['sessions'] + 50} open", f"{mem['bridge_rss_growth_bytes_per_session']:.0f} B/session",
         f"bridge RSS {mem['bridge_rss_before_mb']:.1f} -> {mem['bridge_rss_after_mb']:.1f} MB; sample exact: {mem['correct']}"],
    ]  # fmt: skip
    return f"{title(report)}\n{tabulate(rows, ['figure (medians over rounds)', 'value', 'detail'], tablefmt='github')}"


# -- the training run: soak and in-flight levels ----------------------------------------------------------


def scrape(url: str) -> dict[str, Any]:
    """The bridge's own series from ``/metrics`` (``name{k=v,...}`` -> value; histograms and
    ``_created`` left out), their count and the page's size."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
            text = response.read().decode()
    except OSError as exc:
        return {"bytes": 0, "samples": 0, "series": {}, "error": str(exc)}
    series: dict[str, float] = {}
    count = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            count += 1
            if sample.name.startswith("gym_mcp_bridge_") and not sample.name.endswith(SKIPPED):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                series[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return {"bytes": len(text), "samples": count, "series": series}


def by_labels(series: dict[str, float], name: str) -> dict[str, float]:
    """One metric's series by their label string (``""`` for none)."""
    return {k[len(name) :]: v for k, v in series.items() if k == name or k.startswith(name + "{")}


def metric_sum(series: dict[str, float], name: str) -> float:
    return sum(v for k, v in series.items() if k == name or k.startswith(name + "{"))


def render_sample(s: dict[str, Any]) -> str:
    """One soak sample, as printed while the soak runs."""
    m = s["metrics"]["series"]
    return (
        f"soak {s['t_s']:7.0f}s {s['rollouts']:>9} rollouts {s['rollouts_per_s']:7.1f}/s  bridge RSS "
        f"{s['bridge_rss_kb'] / 1024:6.1f} MB fds {s['bridge_fds']:>4}  upstream RSS "
        f"{s['upstream_rss_kb'] / 1024:6.1f} MB  active {metric_sum(m, 'gym_mcp_bridge_sessions_active'):.0f} "
        f"finished {metric_sum(m, 'gym_mcp_bridge_sessions_finished'):.0f} state "
        f"{metric_sum(m, 'gym_mcp_bridge_state_bytes') / 2**20:.1f} MB rejections "
        f"{metric_sum(m, 'gym_mcp_bridge_rejections_total'):.0f}  /metrics {s['metrics']['bytes']} B  "
        f"not exact {s['not_exact']}"
    )


def render_run(run: dict[str, Any]) -> str:
    """One in-flight run, as printed when it ends."""
    return (
        f"inflight {run['level']:>5} round {run['round']} {run['path']:<6} {run['rollouts_per_s']:7.1f} rollouts/s "
        f"p50 {run['p50_ms']:8.1f} ms p99 {run['p99_ms']:8.1f} ms  client {run['client_cores']:.2f} core  "
        + ", ".join(f"{k} {v}" for k, v in run["outcomes"].items() if v)
    )


def soak_header(report: dict[str, Any]) -> str:
    given = ", ".join(f"{k}={v}" for k, v in report["bridge_settings"].items()) or "none (defaults)"
    return (
        f"{title(report)}\ncommand: {report['command']}\nbridge settings changed: {given}; bridge soft "
        f"RLIMIT_NOFILE at spawn {report['bridge_nofile_at_spawn']}, seen after start {report['bridge_nofile_soft']}"
    )


def outcome_line(outcomes: dict[str, int], reasons: dict[str, int], examples: dict[str, str]) -> str:
    line = ", ".join(f"{k} {outcomes.get(k, 0)}" for k in OUTCOMES)
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
        line += f"\n  {n} x {reason}: {examples.get(reason, '')[:200]}"
    return line


def summarize_soak(
    done: list[float], t0: float, samples: list[dict[str, Any]], tally: dict[str, Any]
) -> dict[str, Any]:
    """The soak's summary: ``done`` holds each rollout's end (monotonic seconds), ``t0`` the start."""
    total = len(done)
    tenth = max(1, total // 10)
    first = tenth / max(1e-9, done[tenth - 1] - t0) if total else 0.0
    last = tenth / max(1e-9, done[-1] - done[-tenth - 1]) if total > tenth else first
    warm_at = min(100_000, tenth)
    warm = next((s for s in samples if s["rollouts"] >= warm_at), samples[-1])
    start, end = samples[0], samples[-1]
    per = 1000 / max(1, total)
    return {
        "rollouts": total,
        **tally,
        "seconds": end["t_s"],
        "rollouts_per_s": total / max(1e-9, done[-1] - t0) if total else 0.0,
        "first_10pct_per_s": first,
        "last_10pct_per_s": last,
        "last_over_first": last / first if first else 0.0,
        "warm_up_at_rollouts": warm["rollouts"],
        "bridge_rss_mb": {"start": start["bridge_rss_kb"] / 1024, "warm_up": warm["bridge_rss_kb"] / 1024,
                          "end": end["bridge_rss_kb"] / 1024},
        "bridge_rss_growth_after_warm_up_mb": (end["bridge_rss_kb"] - warm["bridge_rss_kb"]) / 1024,
        "upstream_rss_mb": {"start": start["upstream_rss_kb"] / 1024, "end": end["upstream_rss_kb"] / 1024},
        "bridge_fds": {"start": start["bridge_fds"], "warm_up": warm["bridge_fds"], "end": end["bridge_fds"]},
        "metrics_bytes": {"start": start["metrics"]["bytes"], "warm_up": warm["metrics"]["bytes"],
                          "end": end["metrics"]["bytes"]},
        "metrics_end": end["metrics"]["series"],
        "cpu_ms_per_rollout": {
            name: (end[f"{name}_cpu_s"] - start[f"{name}_cpu_s"]) * per for name in ("bridge", "upstream", "client")
        },
        "client_cores": (end["client_cpu_s"] - start["client_cpu_s"]) / max(1e-9, end["t_s"]),
        "samples": samples,
    }  # fmt: skip


def render_soak(report: dict[str, Any]) -> str:
    s = report["summary"]
    rss, fd, mb, cpu = s["bridge_rss_mb"], s["bridge_fds"], s["metrics_bytes"], s["cpu_ms_per_rollout"]
    return "\n".join(
        [
            soak_header(report),
            f"rollouts: {s['rollouts']} in {s['seconds']:.0f} s ({s['rollouts_per_s']:.1f}/s), {report['workers']} "
            f"workers, a new connection per request, never closed: "
            + outcome_line(s["outcomes"], s["reasons"], s["examples"])
            + f"; rollouts with a retried tools/call: {s['retried_rollouts']}",
            f"rollouts/s: first 10 % {s['first_10pct_per_s']:.1f}, last 10 % {s['last_10pct_per_s']:.1f} "
            f"(last / first {s['last_over_first']:.3f})",
            f"bridge RSS: start {rss['start']:.1f} MB, at {s['warm_up_at_rollouts']} rollouts {rss['warm_up']:.1f} "
            f"MB, end {rss['end']:.1f} MB: {s['bridge_rss_growth_after_warm_up_mb']:+.1f} MB after warm-up; "
            f"upstream RSS {s['upstream_rss_mb']['start']:.1f} -> {s['upstream_rss_mb']['end']:.1f} MB",
            f"bridge descriptors: start {fd['start']}, warm-up {fd['warm_up']}, end {fd['end']}; /metrics "
            f"{mb['start']} -> {mb['warm_up']} -> {mb['end']} bytes",
            f"CPU per rollout: bridge {cpu['bridge']:.2f} ms, upstream {cpu['upstream']:.2f} ms, this client "
            f"{cpu['client']:.2f} ms (the client used {s['client_cores']:.2f} of a core)",
        ]
    )


def summarize_level(level: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's runs: medians over rounds; the ratio bridge ÷ Gym alone taken within each round."""

    def med(path: str, key: str) -> float:
        return float(np.median([r[key] for r in runs if r["path"] == path]))

    def cpu(path: str) -> dict[str, float]:
        names = runs[0]["cpu_ms_per_rollout"]
        mine = [r for r in runs if r["path"] == path]
        return {n: float(np.median([r["cpu_ms_per_rollout"][n] for r in mine])) for n in names}

    pairs = {(r["round"], r["path"]): r["rollouts_per_s"] for r in runs}
    ratios = [pairs[(rnd, "bridge")] / pairs[(rnd, "gym")] for rnd in sorted({r["round"] for r in runs})]
    return {
        "level": level,
        **{f"{p}_{k}": med(p, k) for p in ("bridge", "gym") for k in ("rollouts_per_s", "p50_ms", "p99_ms")},
        "ratio": float(np.median(ratios)),
        "ratios": ratios,
        "bridge_cpu_ms_per_rollout": cpu("bridge"),
        "gym_cpu_ms_per_rollout": cpu("gym"),
        "client_cores": max(r["client_cores"] for r in runs),
    }


def render_inflight(report: dict[str, Any]) -> str:
    lines = [
        soak_header(report),
        f"two replicas on one Gym upstream; each request to a replica at random; {report['per_worker']} "
        f"rollouts per in-flight slot, {report['rounds']} rounds, medians",
        f"{'in flight':>9} {'bridge/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'gym/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'ratio':>6}  CPU ms per rollout through the bridge (Gym alone: upstream, client)",
    ]
    for s in report["levels"]:
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in s["bridge_cpu_ms_per_rollout"].items())
        gym = s["gym_cpu_ms_per_rollout"]
        lines.append(
            f"{s['level']:>9} {s['bridge_rollouts_per_s']:>9.1f} {s['bridge_p50_ms']:>8.1f} {s['bridge_p99_ms']:>8.1f} "
            f"{s['gym_rollouts_per_s']:>8.1f} {s['gym_p50_ms']:>8.1f} {s['gym_p99_ms']:>8.1f} {s['ratio']:>6.2f}  "
            f"{cpu} (upstream {gym['upstream']:.2f}, client {gym['client']:.2f}); client peak {s['client_cores']:.2f} core"
        )
    for name, tally in report["tally"].items():
        lines.append(f"{name}: " + outcome_line(tally["outcomes"], tally["reasons"], tally["examples"]))
    lines.append(f"rollouts with a retried tools/call: {report['tally']['bridge']['retried_rollouts']}")
    return "\n".join(lines)
