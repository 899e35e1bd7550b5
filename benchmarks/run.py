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
  a session through any replica; its bridge CPU is both replicas' together;
* ``capacity`` as the first argument runs ``benchmarks/capacity.py`` instead (the bridge's own
  capacity in front of a bare upstream, against nginx; ``make bench ARGS="capacity --rounds 15"``),
  ``footprint`` runs ``benchmarks/footprint.py`` (restart to ready, idle sessions at 10,000),
  ``soak`` and ``inflight`` run ``benchmarks/soak.py`` (a training run: never-closed rollouts for an
  hour, and 256 to 4,096 rollouts in flight on two replicas against Gym alone),
  and ``collector`` runs ``benchmarks/collector.py`` (Gym's own launcher and collector at scale);
* the hops (``benchmarks/hops.py``, ``--hops``): a synchronous keep-alive client (``http.client``)
  straight to the upstream, to the owner replica, through a non-owner, and spread over 2 and 3
  replicas, at 1 and 16 sessions, each as a ratio to direct HTTP in the same round, with CPU per
  call per process.

The idle-session and startup measurements live in ``benchmarks/lifecycle.py``, the table, plot and
forwarding summary in ``benchmarks/report.py``.

Every run checks correctness: each session's final counter must equal its seed plus its calls
(the proxy, which merges every caller into one Gym session, is checked on the merged counter).
A wrong counter fails the run. Results print as a table and are written as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import hops, lifecycle, procs, upstream_clients
from benchmarks.calls import DEFAULT_PATHS, PATHS, SWEEP_PATHS, Bench
from benchmarks.procs import BenchError
from benchmarks.report import forwarding_cost, machine, plot, table


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
        "--hops",
        default="1x1000,16x100",
        help="the synchronous-client hops (benchmarks/hops.py: direct, owner, forwarded, 2 and 3 replicas) "
        "as sessions x calls per session, comma list; '' to skip",
    )
    p.add_argument("--hops-rounds", type=int, default=5)
    p.add_argument("--hops-plot", type=Path, default=procs.ROOT / "docs" / "performance-hops.png")
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
            "client_calls": 200, "client_repeats": 3, "hops": "1x100,4x25", "hops_rounds": 1,
        }  # fmt: skip
        for key, value in defaults.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
        args.no_cold_start = True
        if "--plot" not in (argv if argv is not None else sys.argv[1:]):
            args.plot = None
        if "--hops-plot" not in (argv if argv is not None else sys.argv[1:]):
            args.hops_plot = None
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
    co_start: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="gym-mcp-bench-") as tmp:
        bench = Bench(args, Path(tmp))
        ready = bench.ready_s
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
                idle = None
                if args.idle_sessions:
                    idle = await lifecycle.idle_sessions(
                        bench.workdir, bench.procs["upstream"], http, args.idle_sessions, ready
                    )
                clients = await bench_clients(bench) if args.client_repeats else None
            if args.startup_repeats:
                lifecycle.restarts(bench.workdir, bench.procs["upstream"], args.startup_repeats, ready)
                co_start = lifecycle.co_start(bench.workdir, args.startup_repeats, bench.log)
            cold = None if args.no_cold_start else lifecycle.cold_start(bench.workdir)
            peaks = {name: proc.memory() for name, proc in bench.procs.items()}
        finally:
            bench.stop()
        hop_rows: list[dict[str, Any]] = []
        hop_runs: list[hops.HopRun] = []
        if args.hops:
            upstream, replicas, relays = hops.start(Path(tmp), 3, bench.log)
            try:
                hop_runs = hops.HopBench(upstream, replicas, bench.log, relays).rounds(
                    hops.HOP_PATHS, hops.parse_levels(args.hops), args.hops_rounds
                )
            finally:
                for proc in [*replicas, *relays.values(), upstream]:
                    proc.stop()
            hop_rows = hops.summarize(hop_runs)
    plot_error = plot(bench.sweep, args.plot) if args.plot and bench.sweep else None
    if args.hops_plot and hop_rows:
        plot_error = hops.plot(hop_rows, args.hops_plot) or plot_error
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
    if hop_rows:
        print()
        print(hops.table(hop_rows))
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
        "hops": {"summary": hop_rows, "runs": [asdict(r) for r in hop_runs]} if hop_rows else None,
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
    given = list(argv if argv is not None else sys.argv[1:])
    if given[:1] == ["capacity"]:  # make bench ARGS="capacity ...": benchmarks/capacity.py
        from benchmarks import capacity

        return capacity.main(given[1:])
    if given[:1] == ["footprint"]:  # make bench ARGS="footprint ...": benchmarks/footprint.py
        from benchmarks import footprint

        return footprint.main(given[1:])
    if given[:1] in (["soak"], ["inflight"]):  # make bench ARGS="soak ..." / "inflight ...": soak.py
        from benchmarks import soak

        return soak.main(given)
    if given[:1] == ["collector"]:  # make bench ARGS="collector ...": benchmarks/collector.py
        from benchmarks import collector

        return collector.main(given[1:])
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
