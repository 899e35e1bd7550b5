"""The call workloads of ``benchmarks.run``: each path to the counter tools (``PATHS``), one run of
S sessions x C calls through a path with its latency, CPU per call and correctness (``Bench.run_once``),
repeats interleaved across paths, and the per-path medians (``Bench.summarize``)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import procs
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


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.procs: dict[str, Proc] = {}
        self.skipped: dict[str, str] = {}
        self.clients: dict[str, PathClient] = {}
        self.results: list[RunResult] = []
        self.sweep: list[RunResult] = []
        self.ready_s: list[float] = []  # bridge (re)starts, spawn to ready
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
            self.ready_s.append(float(bridge.extra["ready_s"]))  # type: ignore[arg-type]
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


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
