"""The soak benchmark's figures (``benchmarks/soak.py``): the bridge's ``/metrics`` read into a few
series, the soak's summary (rollouts/s over the first and the last 10 %, RSS and descriptors after
warm-up, CPU per rollout), each in-flight level's medians and ratio, and the text printed for both."""

from __future__ import annotations

import urllib.request
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

OUTCOMES = ("exact", "wrong", "refused", "error")
METRIC_PREFIXES = (
    "gym_mcp_bridge_sessions",
    "gym_mcp_bridge_state",
    "gym_mcp_bridge_rejections",
    "gym_mcp_bridge_retries",
)


def scrape(url: str) -> dict[str, Any]:
    """The bridge's session, state, rejection and retry series from ``/metrics``, and its size."""
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
            if sample.name.startswith(METRIC_PREFIXES) and not sample.name.endswith("_created"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                series[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return {"bytes": len(text), "samples": count, "series": series}


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


def header(report: dict[str, Any]) -> str:
    info = report["machine"]
    given = ", ".join(f"{k}={v}" for k, v in report["bridge_settings"].items()) or "none (defaults)"
    return (
        f"gym-mcp-bridge {report['mode']}, {report['when_utc'][:16].replace('T', ' ')} UTC, {info['cpu']} x{info['cores']}, "
        f"load avg {info['loadavg_at_start'][0]:.2f} at start, {report['loadavg_at_end'][0]:.2f} at end\n"
        f"command: {report['command']}\nbridge settings changed: {given}; bridge soft RLIMIT_NOFILE at "
        f"spawn {report['bridge_nofile_at_spawn']}, seen after start {report['bridge_nofile_soft']}"
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
            header(report),
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
        header(report),
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
