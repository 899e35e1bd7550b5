"""``make bench`` / ``python -m benchmarks.run``: the bridge against the paths it competes with.

One process starts the Gym upstream (nemo-gym 0.4.0, ``example_session_state_mgmt``), the bridge in
external mode on that same upstream, and where their environments can be built, Gym 0.7's own
in-process MCP server (``expose_tools_over_mcp``) and a generic OpenAPI->MCP proxy (FastMCP
``from_openapi``, out of process, on the same upstream). It then runs, with repeats interleaved
across paths (so machine noise hits every path alike) and medians taken:

* sequential: one session, ``--seq-calls`` ``increment_counter`` calls;
* concurrent: ``--sessions`` sessions x ``--calls`` calls each, all at once;
* a concurrency sweep (1, 8, 32, 128 sessions) for direct, bridge and Gym in-process (the plot);
* 1000 idle sessions (bridge RSS growth per session); startup: the bridge and the upstream spawned
  together (how ``compose up`` and the pod start them: how long after the upstream the bridge is
  ready), the bridge restarted against a running upstream (spawn to ready), and ``serve`` cold
  start (managed upstream) to ready;
* the bridge's upstream client (its keep-alive pool) against aiohttp's and httpx's on one POST to
  the upstream (``benchmarks/upstream_clients.py``; ``--only-clients`` runs just that);
* forwarding (``bridge-fwd``): a second replica (same secret, its own advertise URL) that does not
  own the sessions; every call goes to it and is relayed to the owner, the bridge of the ``bridge``
  path. Compared with ``bridge`` (the same calls straight to the owner) it is the cost of reaching
  a session through any replica; its bridge CPU is both replicas' together.

Every run checks correctness: each session's final counter must equal its seed plus its calls
(the proxy, which merges every caller into one Gym session, is checked on the merged counter).
A wrong counter fails the run. Results print as a table and are written as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import procs, upstream_clients
from benchmarks.clients import DirectClient, McpRawClient, McpSdkClient, PathClient, ProxyRawClient
from benchmarks.procs import BenchError, Proc

# Path name -> (label, which process is "the bridge" for CPU/RSS, which is "the upstream").
PATHS: dict[str, tuple[str, str | None, str]] = {
    "direct": ("direct HTTP, keep-alive (reference)", None, "upstream"),
    "bridge": ("bridge MCP, raw JSON-RPC (handshake era)", "bridge", "upstream"),
    "bridge-2026": ("bridge MCP, raw JSON-RPC (2026-07-28)", "bridge", "upstream"),
    "bridge-sdk": ("bridge MCP, official MCP SDK client", "bridge", "upstream"),
    "bridge-fwd": ("bridge MCP via a non-owner replica (forwarded)", "bridge-peer+bridge", "upstream"),
    "gym07": ("Gym 0.7 in-process MCP, raw JSON-RPC", None, "gym07"),
    "gym07-sdk": ("Gym 0.7 in-process MCP, official MCP SDK client", None, "gym07"),
    "gym07-direct": ("Gym 0.7 server, direct HTTP (its own reference)", None, "gym07"),
    "fastmcp": ("generic OpenAPI->MCP proxy (FastMCP), raw", "fastmcp", "upstream"),
}
DEFAULT_PATHS = list(PATHS)
SWEEP_PATHS = ["direct", "bridge", "gym07"]


@dataclass
class RunResult:
    path: str
    workload: str
    repeat: int
    sessions: int
    calls: int
    wall_s: float
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    bridge_cpu_ms_per_call: float | None
    upstream_cpu_ms_per_call: float | None
    client_cpu_ms_per_call: float
    correct: bool
    detail: str = ""


@dataclass
class Summary:
    path: str
    label: str
    workload: str
    calls_per_s: float
    ratio: float | None
    ratio_own: float | None
    p50_ms: float
    p99_ms: float
    added_p50_ms: float | None
    bridge_cpu_ms_per_call: float | None
    upstream_cpu_ms_per_call: float | None
    bridge_rss_mb: float | None
    upstream_rss_mb: float | None
    repeats: int
    correct: bool
    notes: list[str] = field(default_factory=list)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.procs: dict[str, Proc] = {}
        self.skipped: dict[str, str] = {}
        self.clients: dict[str, PathClient] = {}
        self.results: list[RunResult] = []
        self.sweep: list[RunResult] = []
        self.extra: dict[str, Any] = {}
        self.seed_counter = 1000
        self.http: aiohttp.ClientSession | None = None

    def log(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    # -- setup ---------------------------------------------------------------------------------

    def start(self, wanted: list[str]) -> None:
        self.log(f"bench: starting the upstream ({procs.SERVER}, nemo-gym 0.4.0) ...")
        self.procs["upstream"] = upstream = procs.start_upstream(self.workdir)
        self.log(f"bench: upstream ready on {upstream.url} after {upstream.extra['boot_s']:.1f}s")
        if any(p.startswith("bridge") for p in wanted):
            self.procs["bridge"] = bridge = procs.start_bridge(self.workdir, upstream.url)
            self.extra.setdefault("bridge_restart_ready_s", []).append(bridge.extra["ready_s"])
            self.log(f"bench: bridge ready on {bridge.url} after {bridge.extra['ready_s']:.2f}s")
        if "bridge-fwd" in wanted:  # a replica that owns none of the sessions: it forwards every call
            self.procs["bridge-peer"] = peer = procs.start_bridge(
                self.workdir, upstream.url, name="bridge-peer"
            )
            self.log(f"bench: second replica (forwarding to {self.procs['bridge'].url}) ready on {peer.url}")
        if any(p.startswith("gym07") for p in wanted):
            reason = procs.ensure_gym07_env(self.workdir / "gym07-env-build.log")
            if reason is None:
                try:
                    self.procs["gym07"] = g = procs.start_gym07(self.workdir)
                    self.log(f"bench: Gym {g.extra.get('gym_version')} in-process MCP ready on {g.url}")
                except BenchError as exc:
                    reason = f"Gym 0.7 server did not start: {exc}"
            if reason is not None:
                for name in ("gym07", "gym07-sdk", "gym07-direct"):
                    self.skipped[name] = reason
                self.log(f"bench: skipping the Gym 0.7 columns: {reason}")
        if "fastmcp" in wanted:
            reason = procs.ensure_fastmcp_env(self.workdir / "fastmcp-env-build.log")
            if reason is None:
                try:
                    self.procs["fastmcp"] = f = procs.start_fastmcp(self.workdir, upstream.url)
                    self.log(f"bench: FastMCP proxy ready on {f.url}")
                except BenchError as exc:
                    reason = f"FastMCP proxy did not start: {exc}"
            if reason is not None:
                self.skipped["fastmcp"] = reason
                self.log(f"bench: skipping the FastMCP column: {reason}")

    def make_clients(self, http: aiohttp.ClientSession, wanted: list[str]) -> None:
        up = self.procs["upstream"].url
        factories: dict[str, Callable[[], PathClient]] = {
            "direct": lambda: DirectClient(http, up),
            "bridge": lambda: McpRawClient(http, self.procs["bridge"].url, "bridge"),
            "bridge-2026": lambda: McpRawClient(http, self.procs["bridge"].url, "bridge-2026", modern=True),
            "bridge-sdk": lambda: McpSdkClient(http, self.procs["bridge"].url, "bridge-sdk"),
            "bridge-fwd": lambda: McpRawClient(
                http, self.procs["bridge-peer"].url, "bridge-fwd", seed_url=self.procs["bridge"].url
            ),
            "gym07": lambda: McpRawClient(http, self.procs["gym07"].url, "gym07"),
            "gym07-sdk": lambda: McpSdkClient(http, self.procs["gym07"].url, "gym07-sdk"),
            "gym07-direct": lambda: DirectClient(http, self.procs["gym07"].url, "gym07-direct"),
            "fastmcp": lambda: ProxyRawClient(http, self.procs["fastmcp"].url, "fastmcp"),
        }
        for name in wanted:
            if name not in self.skipped:
                self.clients[name] = factories[name]()

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()

    # -- one workload run ------------------------------------------------------------------------

    async def run_once(self, path: str, workload: str, sessions: int, calls: int, repeat: int) -> RunResult:
        client = self.clients[path]
        _, bridge_role, upstream_role = PATHS[path]
        bridges = [self.procs[role] for role in bridge_role.split("+")] if bridge_role else []
        upstream = self.procs[upstream_role]
        seeds = []
        for _ in range(sessions):
            self.seed_counter += 7
            seeds.append(self.seed_counter)
        latencies: list[float] = []
        finals: dict[int, int] = {}
        gate = asyncio.Semaphore(16)
        go, calls_done = asyncio.Event(), asyncio.Event()
        seeded: list[Any] = []
        running = [sessions]
        base = [0]
        finished_at = [0.0]

        async def session_task(index: int, initial: int) -> None:
            # One task owns a session from seed to close: the SDK client's cancel scopes require it.
            async with gate:
                session = await client.seed(initial)
            seeded.append(session)
            try:
                if len(seeded) == sessions:
                    if not client.isolated:
                        base[0] = await client.counter(session)
                    go.set()
                    await asyncio.sleep(0)  # let the timer start before this session's first call
                await go.wait()
                call, append, clock = client.call, latencies.append, time.perf_counter
                for _ in range(calls):
                    t0 = clock()
                    value = await call(session, "increment_counter", {"count": 1})
                    append(clock() - t0)
                    if value != {"success": True}:
                        raise BenchError(f"{path}: increment_counter answered {value!r}")
                running[0] -= 1
                if not running[0]:
                    finished_at[0] = time.perf_counter()
                    calls_done.set()
                await calls_done.wait()
                if client.isolated or index == 0:
                    async with gate:
                        finals[index] = await client.counter(session)
            finally:
                await client.close(session)

        tasks = [asyncio.create_task(session_task(i, s)) for i, s in enumerate(seeds)]
        await wait_or_fail(go, tasks)
        cpu0 = (sum(b.cpu() for b in bridges), upstream.cpu(), time.process_time())
        started = time.perf_counter()
        await wait_or_fail(calls_done, tasks)
        cpu1 = (sum(b.cpu() for b in bridges), upstream.cpu(), time.process_time())
        wall = finished_at[0] - started
        await asyncio.gather(*tasks)
        total = sessions * calls
        correct, detail = True, ""
        if client.isolated:
            wrong = [(s, finals.get(i)) for i, s in enumerate(seeds) if finals.get(i) != s + calls]
            if wrong:
                correct = False
                detail = f"{len(wrong)} of {sessions} sessions ended wrong, e.g. seed {wrong[0][0]} -> {wrong[0][1]}"
        else:
            if finals[0] - base[0] != total:
                correct = False
                detail = f"merged counter moved by {finals[0] - base[0]}, expected {total}"
            else:
                detail = "one merged Gym session for every caller (no per-rollout isolation)"
        return RunResult(
            path=path,
            workload=workload,
            repeat=repeat,
            sessions=sessions,
            calls=total,
            wall_s=wall,
            calls_per_s=total / wall,
            p50_ms=percentile(latencies, 0.5) * 1e3,
            p99_ms=percentile(latencies, 0.99) * 1e3,
            bridge_cpu_ms_per_call=(cpu1[0] - cpu0[0]) / total * 1e3 if bridges else None,
            upstream_cpu_ms_per_call=(cpu1[1] - cpu0[1]) / total * 1e3,
            client_cpu_ms_per_call=(cpu1[2] - cpu0[2]) / total * 1e3,
            correct=correct,
            detail=detail,
        )

    async def interleaved(
        self, paths: list[str], workload: str, sessions: int, calls: int, repeats: int
    ) -> list[RunResult]:
        out = []
        for repeat in range(repeats):
            order = paths[repeat % len(paths) :] + paths[: repeat % len(paths)]  # rotate: no fixed position
            for path in order:
                result = await self.run_once(path, workload, sessions, calls, repeat)
                out.append(result)
                self.log(
                    f"bench: {workload:>10} r{repeat + 1} {path:<13} {result.calls_per_s:8.0f} calls/s "
                    f"p50 {result.p50_ms:6.2f} ms p99 {result.p99_ms:6.2f} ms"
                    + ("" if result.correct else f"  WRONG: {result.detail}")
                )
        return out

    async def warm_up(self, paths: list[str]) -> None:
        for path in paths:
            await self.run_once(path, "warmup", 4, max(10, self.args.warmup // 4), 0)

    # -- extras ----------------------------------------------------------------------------------

    async def idle_sessions(self, count: int) -> dict[str, Any]:
        """A fresh bridge: RSS before and after seeding ``count`` sessions that then sit idle."""
        upstream = self.procs["upstream"]
        bridge = procs.start_bridge(self.workdir, upstream.url, name="bridge-idle")
        try:
            self.extra.setdefault("bridge_restart_ready_s", []).append(bridge.extra["ready_s"])
            assert self.http is not None
            client = McpRawClient(self.http, bridge.url, "bridge-idle")
            warm = await gather_limited([lambda: client.seed(1) for _ in range(50)], 16)
            for session in warm[:10]:
                await client.call(session, "increment_counter", {"count": 1})
            await asyncio.sleep(0.5)
            before = bridge.memory()["rss_kb"]
            up_before = upstream.memory()["rss_kb"]
            opened = await gather_limited([lambda: client.seed(5) for _ in range(count)], 16)
            await asyncio.sleep(0.5)
            after = bridge.memory()
            # every idle session still answers (isolation held while it waited)
            sample = opened[:: max(1, count // 20)]
            finals = await gather_limited([functools.partial(client.counter, s) for s in sample], 16)
            return {
                "sessions": count,
                "bridge_rss_before_mb": before / 1024,
                "bridge_rss_after_mb": after["rss_kb"] / 1024,
                "bridge_rss_growth_bytes_per_session": (after["rss_kb"] - before) * 1024 / count,
                "bridge_peak_rss_mb": after["hwm_kb"] / 1024,
                "upstream_rss_growth_bytes_per_session": (upstream.memory()["rss_kb"] - up_before)
                * 1024
                / count,
                "correct": all(f == 5 for f in finals),
            }
        finally:
            bridge.stop()

    def startup(self, repeats: int) -> None:
        upstream = self.procs["upstream"]
        for i in range(repeats):
            bridge = procs.start_bridge(self.workdir, upstream.url, name=f"bridge-start-{i}")
            self.extra.setdefault("bridge_restart_ready_s", []).append(bridge.extra["ready_s"])
            bridge.stop()

    def co_start(self, repeats: int) -> None:
        """Upstream and bridge spawned together: how long after the upstream the bridge is ready."""
        for i in range(repeats):
            upstream_s, bridge_s = procs.start_together(self.workdir, f"together-{i}")
            self.extra.setdefault("co_start", []).append(
                {"upstream_ready_s": upstream_s, "bridge_ready_s": bridge_s}
            )
            self.log(
                f"bench: started together: upstream ready {upstream_s:.2f}s, bridge ready {bridge_s:.2f}s"
            )

    def cold_start(self) -> float:
        bridge = procs.start_bridge(self.workdir, None, name="bridge-cold")
        try:
            return float(bridge.extra["ready_s"])  # type: ignore[arg-type]
        finally:
            bridge.stop()

    # -- summary ---------------------------------------------------------------------------------

    def summarize(self, results: list[RunResult], workload: str) -> list[Summary]:
        by_path: dict[str, list[RunResult]] = {}
        for r in results:
            if r.workload == workload:
                by_path.setdefault(r.path, []).append(r)
        direct = {r.repeat: r for r in by_path.get("direct", [])}
        own = {r.repeat: r for r in by_path.get("gym07-direct", [])}
        direct_p50 = statistics.median(r.p50_ms for r in direct.values()) if direct else None
        out = []
        for path, runs in by_path.items():
            label, bridge_role, upstream_role = PATHS[path]
            ratios = [r.calls_per_s / direct[r.repeat].calls_per_s for r in runs if r.repeat in direct]
            own_ratios = [r.calls_per_s / own[r.repeat].calls_per_s for r in runs if r.repeat in own]
            bridge = self.procs.get(bridge_role.split("+")[0]) if bridge_role else None
            p50 = statistics.median(r.p50_ms for r in runs)
            out.append(
                Summary(
                    path=path,
                    label=label,
                    workload=workload,
                    calls_per_s=statistics.median(r.calls_per_s for r in runs),
                    ratio=statistics.median(ratios) if ratios else None,
                    ratio_own=statistics.median(own_ratios)
                    if own_ratios and path.startswith("gym07")
                    else None,
                    p50_ms=p50,
                    p99_ms=statistics.median(r.p99_ms for r in runs),
                    added_p50_ms=p50 - direct_p50 if direct_p50 is not None and path != "direct" else None,
                    bridge_cpu_ms_per_call=median_or_none([r.bridge_cpu_ms_per_call for r in runs]),
                    upstream_cpu_ms_per_call=median_or_none([r.upstream_cpu_ms_per_call for r in runs]),
                    bridge_rss_mb=bridge.memory()["rss_kb"] / 1024 if bridge else None,
                    upstream_rss_mb=self.procs[upstream_role].memory()["rss_kb"] / 1024,
                    repeats=len(runs),
                    correct=all(r.correct for r in runs),
                    notes=sorted({r.detail for r in runs if r.detail}),
                )
            )
        order = list(PATHS)
        return sorted(out, key=lambda s: order.index(s.path))


async def wait_or_fail(event: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    """Wait for ``event``; if a task fails first, cancel the rest and raise its error."""
    waiter = asyncio.ensure_future(event.wait())
    pending: set[asyncio.Future[Any]] = {waiter, *tasks}
    while not event.is_set():
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not waiter and task.exception() is not None:
                waiter.cancel()
                for other in tasks:
                    other.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise task.exception()  # type: ignore[misc]
    waiter.cancel()


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


def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


async def gather_limited(factories: list[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(factory: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await factory()

    return list(await asyncio.gather(*(one(f) for f in factories)))


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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS), help=f"comma list of {', '.join(PATHS)}")
    p.add_argument("--seq-calls", type=int, default=2000)
    p.add_argument("--sessions", type=int, default=32)
    p.add_argument("--calls", type=int, default=200, help="calls per session in the concurrent workload")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=200, help="calls per path before the first repeat")
    p.add_argument("--sweep", default="1,8,32,128", help="concurrency levels for the plot; '' to skip")
    p.add_argument("--sweep-total", type=int, default=3200, help="total calls per sweep point")
    p.add_argument("--sweep-repeats", type=int, default=3)
    p.add_argument("--idle-sessions", type=int, default=1000, help="0 to skip")
    p.add_argument("--startup-repeats", type=int, default=3, help="bridge restarts timed; 0 to skip")
    p.add_argument("--no-cold-start", action="store_true", help="skip timing 'serve' in managed mode")
    p.add_argument("--client-calls", type=int, default=2000, help="calls per upstream-client repeat")
    p.add_argument("--client-repeats", type=int, default=7, help="upstream-client repeats; 0 to skip")
    p.add_argument(
        "--only-clients",
        action="store_true",
        help="only the upstream-client comparison (pool vs aiohttp vs httpx); JSON to "
        "benchmarks/results/upstream_clients.json unless --json is given",
    )
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "latest.json")
    p.add_argument("--plot", type=Path, default=procs.ROOT / "docs" / "performance-concurrency.png")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a fast subset: 300 sequential calls, 8x25 concurrent, 1 repeat, sweep 1,8, 100 idle "
        "sessions, no cold start, no plot (unless --plot is given explicitly)",
    )
    args = p.parse_args(argv)
    if args.quick:
        defaults = {
            "seq_calls": 300, "sessions": 8, "calls": 25, "repeats": 1, "warmup": 40, "sweep": "1,8",
            "sweep_total": 200, "sweep_repeats": 1, "idle_sessions": 100, "startup_repeats": 1,
            "client_calls": 200, "client_repeats": 3,
        }  # fmt: skip
        for key, value in defaults.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
        args.no_cold_start = True
        if "--plot" not in (argv if argv is not None else sys.argv[1:]):
            args.plot = None
    if args.only_clients and "--json" not in (argv if argv is not None else sys.argv[1:]):
        args.json = procs.ROOT / "benchmarks" / "results" / "upstream_clients.json"
    return args


async def clients_main(args: argparse.Namespace) -> int:
    """``--only-clients``: start the upstream, compare the upstream clients, print and write JSON."""
    when = dt.datetime.now(dt.UTC)
    info = machine()
    with tempfile.TemporaryDirectory(prefix="gym-mcp-bench-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            bench.start([])
            result = await bench_clients(bench)
        finally:
            bench.stop()
    print()
    print(
        f"gym-mcp-bridge upstream-client benchmark, {when:%Y-%m-%d %H:%M} UTC, {info['cpu']} x{info['cores']}, "
        f"load avg at start {info['loadavg_at_start'][0]:.2f}, at end {os.getloadavg()[0]:.2f}"
    )
    print(upstream_clients.table(result))
    if args.json:
        report = {
            "when_utc": when.isoformat(),
            "command": "python -m benchmarks.run " + " ".join(sys.argv[1:]),
            "machine": info,
            "loadavg_at_end": os.getloadavg(),
            "upstream_clients": result,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"json: {args.json}")
    return 0


async def bench_clients(bench: Bench) -> dict[str, Any]:
    args = bench.args
    bench.log(f"bench: upstream clients ({', '.join(upstream_clients.CLIENTS)}) ...")
    return await upstream_clients.compare(
        bench.procs["upstream"].url, args.client_calls, args.client_repeats, args.warmup, bench.log
    )


async def amain(args: argparse.Namespace) -> int:
    if args.only_clients:
        return await clients_main(args)
    wanted = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in PATHS]
    if unknown:
        print(f"benchmarks.run: unknown paths {unknown}; known: {', '.join(PATHS)}", file=sys.stderr)
        return 2
    if "direct" not in wanted:
        wanted.insert(0, "direct")
    when = dt.datetime.now(dt.UTC)
    info = machine()
    with tempfile.TemporaryDirectory(prefix="gym-mcp-bench-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            bench.start(wanted)
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
            async with aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=120),
            ) as http:
                bench.http = http
                bench.make_clients(http, wanted)
                paths = [p for p in wanted if p in bench.clients]
                bench.log(f"bench: paths {', '.join(paths)}; skipped {bench.skipped or 'none'}")
                await bench.warm_up(paths)
                seq = await bench.interleaved(paths, "sequential", 1, args.seq_calls, args.repeats)
                conc = await bench.interleaved(paths, "concurrent", args.sessions, args.calls, args.repeats)
                bench.results = seq + conc
                summaries = bench.summarize(bench.results, "sequential") + bench.summarize(
                    bench.results, "concurrent"
                )
                levels = [int(x) for x in args.sweep.split(",") if x.strip()]
                sweep_paths = [p for p in SWEEP_PATHS if p in bench.clients]
                for level in levels:
                    per = max(5, args.sweep_total // level)
                    bench.sweep += await bench.interleaved(
                        sweep_paths, f"sweep-{level}", level, per, args.sweep_repeats
                    )
                idle = await bench.idle_sessions(args.idle_sessions) if args.idle_sessions else None
                clients = await bench_clients(bench) if args.client_repeats else None
            if args.startup_repeats:
                bench.startup(args.startup_repeats)
                bench.co_start(args.startup_repeats)
            cold = None if args.no_cold_start else bench.cold_start()
            peaks = {name: proc.memory() for name, proc in bench.procs.items()}
        finally:
            bench.stop()
    plot_error = plot(bench.sweep, args.plot) if args.plot and bench.sweep else None
    ready = bench.extra.get("bridge_restart_ready_s", [])
    correct = all(r.correct for r in bench.results + bench.sweep) and (idle is None or idle["correct"])
    print()
    print(
        f"gym-mcp-bridge benchmark, {when:%Y-%m-%d %H:%M} UTC, {info['cpu']} x{info['cores']}, "
        f"load avg at start {info['loadavg_at_start'][0]:.2f}"
    )
    print(
        f"medians of {args.repeats} interleaved repeats; ratio = calls/s over direct HTTP in the same repeat; "
        "+p50 = p50 over direct"
    )
    print()
    print(
        table(
            [s for s in summaries if s.workload == "sequential"],
            f"sequential: 1 session x {args.seq_calls} calls",
        )
    )
    print()
    print(
        table(
            [s for s in summaries if s.workload == "concurrent"],
            f"concurrent: {args.sessions} sessions x {args.calls} calls",
        )
    )
    print()
    forwarding = forwarding_cost(bench.results)
    for cost in forwarding:
        print(
            f"forwarding, {cost['workload']}: via a non-owner replica {cost['forwarded_calls_per_s']:.0f} calls/s "
            f"vs {cost['owner_calls_per_s']:.0f} straight to the owner (x{cost['ratio']:.2f}), p50 "
            f"+{cost['added_p50_ms']:.2f} ms, p99 +{cost['added_p99_ms']:.2f} ms, bridge CPU "
            f"+{cost['added_bridge_cpu_ms_per_call']:.3f} ms/call (both replicas)"
        )
    if forwarding:
        print()
    if bench.sweep:
        print("concurrency sweep (calls/s, median):")
        for level in sorted({r.sessions for r in bench.sweep}):
            row = []
            for name in SWEEP_PATHS:
                values = [r.calls_per_s for r in bench.sweep if r.path == name and r.sessions == level]
                if values:
                    row.append(f"{name} {statistics.median(values):7.0f}")
            print(f"  {level:>4} sessions: " + "   ".join(row))
    if idle:
        print(
            f"idle sessions: {idle['sessions']} -> bridge RSS +{idle['bridge_rss_growth_bytes_per_session'] / 1024:.2f} "
            f"KB/session ({idle['bridge_rss_before_mb']:.1f} -> {idle['bridge_rss_after_mb']:.1f} MB), "
            f"peak {idle['bridge_peak_rss_mb']:.1f} MB"
        )
    co_start = bench.extra.get("co_start", [])
    if co_start:
        gaps = [max(0.0, c["bridge_ready_s"] - c["upstream_ready_s"]) for c in co_start]
        print(
            f"bridge and upstream started together: bridge ready {statistics.median(gaps):.3f}s after the "
            f"upstream (median, n={len(gaps)}, max {max(gaps):.3f}s; upstream boot "
            f"{statistics.median(c['upstream_ready_s'] for c in co_start):.1f}s)"
        )
    if ready:
        print(
            f"bridge (re)started against a running upstream, spawn to ready: median {statistics.median(ready):.2f}s "
            f"(n={len(ready)}, min {min(ready):.2f}s, max {max(ready):.2f}s)"
        )
    if cold is not None:
        print(f"'serve' cold start (managed upstream) to ready: {cold:.2f}s")
    bridge_peak = peaks.get("bridge", {}).get("hwm_kb")
    if bridge_peak:
        print(f"bridge peak RSS over the run: {bridge_peak / 1024:.1f} MB")
    if clients:
        print(upstream_clients.table(clients))
    for name, reason in bench.skipped.items():
        print(f"skipped {name}: {reason}")
    if plot_error:
        print(f"plot skipped: {plot_error}")
    elif args.plot and bench.sweep:
        print(f"plot: {args.plot}")
    print(f"correctness: {'every session final counter exact' if correct else 'FAILED'}")
    report = {
        "when_utc": when.isoformat(),
        "command": "python -m benchmarks.run " + " ".join(sys.argv[1:]),
        "machine": info,
        "loadavg_at_end": os.getloadavg(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "versions": {
            name: proc.extra.get("gym_version")
            for name, proc in bench.procs.items()
            if "gym_version" in proc.extra
        },
        "skipped": bench.skipped,
        "summary": [asdict(s) for s in summaries],
        "runs": [asdict(r) for r in bench.results],
        "sweep": [asdict(r) for r in bench.sweep],
        "idle_sessions": idle,
        "forwarding": forwarding,
        "upstream_clients": clients,
        "bridge_restart_ready_s": ready,
        "co_start": co_start,
        "serve_cold_start_s": cold,
        "peak_memory_kb": peaks,
        "correct": correct,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"json: {args.json}")
    return 0 if correct else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    try:
        with runner:
            return runner.run(amain(args))
    except BenchError as exc:
        print(f"benchmarks.run: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
