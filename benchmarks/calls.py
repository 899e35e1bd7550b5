"""Per-call cost and capacity: what one tool call costs the bridge's core, against its floors, in
front of an upstream that costs next to nothing (``benchmarks/bare_upstream.py``).

    make bench ARGS="calls [--rounds 15] [--levels 1,16,64,256] [--size-levels 1,16] [--quick]"
    make bench ARGS="calls --from-json benchmarks/results/calls.json"   # the table again, nothing run

What is under test runs on core 1, the upstream and this client on core 0; each session has one
keep-alive connection and one call in flight, all sessions at once. Paths (``UNDER_TEST``):
``direct``, the floors ``nginx`` and ``asgi`` (``benchmarks/floors.py``), ``rest``, ``mcp`` (to the
owner) and ``fwd`` (through a non-owner: ``benchmarks/forwarding.py``); workloads ``16B`` and
``64KB``. Rounds interleave the paths, the order rotating. CPU is each process's schedstat over the
timed window. Every answer is checked and every counter read back exact after every run, else the
run stops with exit 1. Medians, intervals, table and plot: ``benchmarks/report.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks import client, floors, procs, report
from benchmarks.client import TOKEN_HEADER, Conn
from benchmarks.procs import BenchError, Proc

PATHS = ["direct", "nginx", "asgi", "rest", "mcp"]
FLOORS = ("direct", "nginx", "asgi")  # carry the upstream's cookie, not a token
MCP_PATHS = ("mcp", "fwd")
UNDER_TEST = {
    "direct": "upstream",
    "nginx": "nginx",
    "asgi": "asgi",
    "rest": "owner",
    "mcp": "owner",
    "fwd": "peer",
}
CLIENT_CORE, SERVER_CORE = 0, 1
SIZES = {"16B": ("increment_counter", 0), "64KB": ("echo", 65536)}


@dataclass
class _Session:
    conn: Conn
    seed: int
    headers: dict[str, str]
    count: int = 0
    latencies: list[float] = field(default_factory=list)


@dataclass
class Run:
    workload: str
    path: str
    sessions: int
    round: int
    calls: int
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_call: dict[str, float]  # process -> CPU ms per call in the timed window ("client" too)
    busy: dict[str, float]  # process -> CPU seconds / wall seconds (1.0 = one core)
    saturated: list[str]  # "client", "upstream", "core 0" when at or past 90 % of a core
    loadavg: float
    counters_exact: int  # sessions whose counter read back exact after the run


class Bench:
    """The processes of a run and the sessions of each (path, sessions), kept across rounds."""

    def __init__(self, workdir: Path, log: Any) -> None:
        self.workdir, self.log = workdir, log
        self.procs: dict[str, Proc] = {}
        self.seeds = itertools.count(1000, 7)
        self.crews: dict[tuple[str, int], list[_Session]] = {}
        self.expected: dict[tuple[str, str], bytes] = {}  # (workload, path) -> the first valid answer

    def start(self, paths: list[str]) -> None:
        pin = ["taskset", "-c", str(SERVER_CORE)]
        self.procs["upstream"] = up = procs.start_bare_upstream(
            self.workdir, ["taskset", "-c", str(CLIENT_CORE)]
        )
        if "nginx" in paths:
            self.procs["nginx"] = floors.start_nginx(self.workdir, up.url, SERVER_CORE)
        if "asgi" in paths:
            self.procs["asgi"] = floors.start_asgi(self.workdir, up.url, pin)
        for name, wanted in (("owner", {"rest", "mcp", "fwd"}), ("peer", {"fwd"})):
            if wanted & set(paths):
                self.procs[name] = procs.start_bridge(
                    self.workdir, up.url, name, command=[*pin, *procs.BRIDGE]
                )
        os.sched_setaffinity(0, {CLIENT_CORE})
        self.log("calls: " + ", ".join(f"{n} {p.url} (pid {p.pid})" for n, p in self.procs.items()))

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()

    async def crew(self, path: str, sessions: int) -> list[_Session]:
        """``sessions`` seeded sessions on ``path``, each on its own connection."""
        if (path, sessions) in self.crews:
            return self.crews[(path, sessions)]
        target = self.procs[UNDER_TEST[path]]
        seeder = target if path in FLOORS else self.procs["owner"]
        out = []
        for _ in range(sessions):
            seed = next(self.seeds)
            conn = await client.connect(seeder.url)
            host = {"host": seeder.url.removeprefix("http://")}
            status, raw, cookies = await conn.call(
                client.request("/seed_session", client.seed_body(seed), host)
            )
            if status != 200:
                raise BenchError(f"{path}: seed answered {status}: {raw[:200]!r}")
            if path in FLOORS:
                headers = {**host, "cookie": "; ".join(c.decode().split(";", 1)[0] for c in cookies)}
            else:
                headers = {"host": target.url.removeprefix("http://")}
                headers[TOKEN_HEADER] = orjson.loads(raw)["mcp"]["headers"][TOKEN_HEADER]
                if path != "rest":
                    headers["accept"] = client.MCP_ACCEPT
                if target is not seeder:
                    conn.transport.close()
                    conn = await client.connect(target.url)
            out.append(_Session(conn, seed, headers))
        self.crews[(path, sessions)] = out
        return out

    @staticmethod
    def _call(path: str, session: _Session, tool: str, arguments: dict[str, Any]) -> bytes:
        if path in MCP_PATHS:
            return client.request("/mcp", client.tools_call(tool, arguments), session.headers)
        return client.request(f"/{tool}", orjson.dumps(arguments), session.headers)

    @staticmethod
    def _value(path: str, status: int, raw: bytes) -> Any:
        if path in MCP_PATHS:
            return client.decode_rpc(path, status, raw)
        if status != 200:
            raise BenchError(f"{path}: HTTP {status}: {raw[:300]!r}")
        return orjson.loads(raw)

    async def run(self, workload: str, path: str, sessions: int, calls: int, round_: int) -> Run:
        crew = await self.crew(path, sessions)
        tool, size = SIZES[workload]
        arguments: dict[str, Any] = {"count": 1} if tool == "increment_counter" else {"data": "x" * size}
        want = {"success": True} if tool == "increment_counter" else arguments
        key, go, clock = (workload, path), asyncio.Event(), time.perf_counter

        async def one(session: _Session, request: bytes) -> None:
            await go.wait()
            call, append, expected = session.conn.call, session.latencies.append, self.expected.get(key)
            for _ in range(calls):
                t0 = clock()
                status, raw, _ = await call(request)
                append(clock() - t0)
                if raw != expected:  # the first answer, or one unlike it: parse and check it
                    if self._value(path, status, raw) != want:
                        raise BenchError(f"{path} {tool}: answered {raw[:200]!r}")
                    expected = self.expected.setdefault(key, raw)
            if tool == "increment_counter":
                session.count += calls

        for session in crew:  # a server may close a connection idle between rounds
            session.latencies = []
            if session.conn.closed:
                session.conn = await client.connect(self.procs[UNDER_TEST[path]].url)
        tasks = [asyncio.create_task(one(s, self._call(path, s, tool, arguments))) for s in crew]
        await asyncio.sleep(0)
        cpu0 = {name: p.cpu() for name, p in self.procs.items()}
        client0, started = time.process_time(), clock()
        go.set()
        try:
            await asyncio.gather(*tasks)
        except BenchError as exc:
            tail = self.procs[UNDER_TEST[path]].log_tail(5)
            raise BenchError(f"{path}, {sessions} sessions, round {round_}: {exc}\n{tail}") from exc
        wall, client1 = clock() - started, time.process_time()
        used = {name: p.cpu() - cpu0[name] for name, p in self.procs.items()}
        used["client"] = client1 - client0
        for session in crew:  # read back through the same path: the counter must be exact
            status, raw, _ = await session.conn.call(self._call(path, session, "get_counter_value", {}))
            value = self._value(path, status, raw)
            if value != {"count": session.seed + session.count}:
                raise BenchError(
                    f"{path}: session seeded {session.seed} read {value!r} after {session.count} calls"
                )
        total = sessions * calls
        busy = {name: seconds / wall for name, seconds in used.items()}
        saturated = [n for n in ("client", "upstream") if busy[n] >= 0.9]
        if busy["client"] + busy["upstream"] >= 0.9:
            saturated.append("core 0")
        latencies = sorted(x for s in crew for x in s.latencies)
        return Run(
            workload=workload, path=path, sessions=sessions, round=round_, calls=total,
            calls_per_s=total / wall,
            p50_ms=latencies[len(latencies) // 2] * 1e3,
            p99_ms=latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))] * 1e3,
            cpu_ms_per_call={n: s / total * 1e3 for n, s in used.items() if s > 0 or n in ("client", "upstream")},
            busy=busy, saturated=saturated, loadavg=os.getloadavg()[0], counters_exact=len(crew),
        )  # fmt: skip


def round_order(paths: list[str], r: int) -> list[str]:
    """The paths of round ``r``, rotated by one each round so load from other jobs hits all alike."""
    return paths[r % len(paths) :] + paths[: r % len(paths)]


async def measure(args: argparse.Namespace, paths: list[str], log: Any) -> tuple[list[Run], str]:
    """Every (workload, sessions) of ``args``: one discarded warm-up run per path, then the rounds."""
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    plan = [("16B", n, args.calls) for n in levels]
    plan += [("64KB", n, args.size_calls) for n in (int(x) for x in args.size_levels.split(",") if x.strip())]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="gym-mcp-calls-") as tmp:
        bench = Bench(Path(tmp), log)
        try:
            bench.start(paths)
            for workload, sessions, total in plan:
                per = max(20, total // sessions)
                for path in paths:
                    await bench.run(workload, path, sessions, per // 4 + 1, -1)
                for r in range(args.rounds):
                    for path in round_order(paths, r):
                        run = await bench.run(workload, path, sessions, per, r)
                        runs.append(run)
                        log(
                            f"{workload:>4} {sessions:>3} sessions r{r + 1:<2} {path:<6} {run.calls_per_s:7.0f} calls/s "
                            f"p99 {run.p99_ms:7.2f} ms load {run.loadavg:.1f}"
                            + (" SATURATED" * bool(run.saturated))
                        )
        except BenchError as exc:
            return runs, str(exc)
        finally:
            bench.stop()
    return runs, ""


def parse_args(question: str, argv: list[str], paths: list[str], doc: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"make bench ARGS='{question}'", description=doc.split("\n\n")[0])
    p.add_argument("--paths", default=",".join(paths), help=f"comma list of {', '.join(paths)}")
    p.add_argument("--levels", default="1,16,64,256", help="concurrent sessions, 16-byte workload")
    p.add_argument("--size-levels", default="1,16", help="concurrent sessions, 64 KiB workload; '' to skip")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument(
        "--calls", type=int, default=2000, help="calls per run, 16 B (split over sessions, >= 20 each)"
    )
    p.add_argument("--size-calls", type=int, default=400, help="calls per run, 64 KiB workload")
    p.add_argument("--quick", action="store_true", help="2 rounds, 1 and 16 sessions, 64 KiB at 1; no JSON")
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / f"{question}.json")
    p.add_argument("--plot", type=Path, default=None, help="write the plot there (PNG)")
    p.add_argument("--from-json", type=Path, help="render a saved run's table and plot; run nothing")
    args = p.parse_args(argv)
    if args.quick:  # a look, not a result: no JSON unless asked for
        args.rounds, args.levels, args.size_levels, args.calls, args.size_calls = 2, "1,16", "1", 400, 40
        args.json = args.json if "--json" in argv else None
    return args


def main(argv: list[str], question: str = "calls", paths: list[str] = PATHS, doc: str = __doc__ or "") -> int:
    args = parse_args(question, argv, paths, doc)
    if args.from_json:
        saved = report.load(args.from_json)
        saved["summary"] = report.summarize_calls(saved["runs"])
        print(report.render_calls(saved))
        report.plot_calls(saved["summary"], args.plot)
        return 0 if saved["correct"] else 1
    chosen = [p.strip() for p in args.paths.split(",") if p.strip()]
    if unknown := set(chosen) - set(UNDER_TEST):
        print(f"unknown paths {sorted(unknown)}; known: {', '.join(UNDER_TEST)}", file=sys.stderr)
        return 2
    header = report.header(question, argv)
    runs, error = asyncio.run(measure(args, chosen, lambda text: print(text, file=sys.stderr, flush=True)))
    out = {**header, "loadavg_at_end": os.getloadavg(), "correct": not error, "error": error}
    out["machine"]["nginx"] = floors.nginx_version()
    out["runs"] = [asdict(r) for r in runs]
    out["summary"] = report.summarize_calls(out["runs"])
    print(report.render_calls(out))
    report.save(out, args.json)
    report.plot_calls(out["summary"], args.plot)
    return 0 if not error else 1
