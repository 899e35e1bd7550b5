"""The bridge's own capacity: calls/s per bridge core and bridge CPU per call, in front of an upstream
that costs next to nothing (``benchmarks/bare_upstream.py``), against nginx on the same upstream.

    python -m benchmarks.capacity [--rounds 15] [--levels 1,16,64,256] [--quick] [--json FILE] [--plot FILE]
    python -m benchmarks.capacity --from-json benchmarks/results/capacity.json [--plot FILE]
    make bench ARGS="capacity --rounds 15"

Processes and cores (``taskset``): the bridge replicas and nginx on core 1 (the core under test), the
bare upstream and this client on core 0. Paths (``PATHS``), each one keep-alive connection per session,
one call at a time per session, every session at once:

* ``direct``: ``POST /<tool>`` to the bare upstream with the session cookie (what core 0 can drive);
* ``nginx``: the same through nginx (Debian's, ``scripts/setup-nginx.sh``; ``benchmarks/nginx.py``), a
  plain keep-alive reverse proxy, one process (the floor of any second process on the path);
* ``relay``, ``splice`` and ``asgi``: the floors of a second process in Python
  (``benchmarks/relay.py``): bytes copied both ways on uvloop with no HTTP parsing; each request
  parsed by httptools and relayed over the bridge's upstream pool below any ASGI cycle (the least a
  forwarder below ASGI costs); and the bridge's own HTTP stack (uvicorn, its protocol, its upstream
  pool) relaying each request with none of the bridge's MCP work;
* ``rest``: ``POST /<tool>`` to the bridge with the session token (Gym's REST surface);
* ``mcp``: a stateless ``tools/call`` on ``/mcp`` to the bridge that owns the session;
* ``fwd``: the same call to a second replica, which forwards it to the owner (both on core 1);
* ``fwd-splice``: that call to the ``forward`` floor (``benchmarks/relay.py``) in the non-owner's place;
* ``rest@base``, ``mcp@base``, ``fwd@base`` (with ``--baseline REV``): the same three paths on the
  bridge of git revision REV (its ``bridge/`` package from ``git archive``, run by this interpreter),
  so a change is measured against what it changes in the same rounds: the report gives each path's
  CPU per call ÷ the baseline's, paired per round, with its interval.

Workloads: ``16B`` (``increment_counter {"count": 1}``, answer ``{"success":true}``) and ``64KB``
(``echo`` with a 64 KiB string: the argument and the answer are 64 KiB each). Rounds interleave every
path (the order rotates each round), so load from other jobs hits every path alike. CPU comes from
``/proc/<pid>/task/*/schedstat`` over the timed window only; a run where the client or the upstream
(together on core 0) used >= 90 % of a core is flagged: it measured core 0, not the path. Correctness:
every answer is checked, and after every run each session's counter is read back through its path
and must equal its seed plus its increments, else the benchmark stops with exit 1. Nothing here
asserts a time. The table, intervals and plot: ``benchmarks/capacity_report.py``; ``--from-json``
renders them again from a saved run without running anything.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks import capacity_report, nginx, procs, raw_http, revisions
from benchmarks.clients import TOKEN_HEADER
from benchmarks.procs import BenchError, Proc

PATHS = ["direct", "nginx", "relay", "splice", "asgi", "rest", "mcp", "fwd", "fwd-splice"]
FLOORS = ("direct", "nginx", "relay", "splice", "asgi")  # paths that carry the upstream's cookie, not a token
BRIDGE_PATHS = ("rest", "mcp", "fwd")
MCP_PATHS = ("mcp", "fwd", "fwd-splice")  # a JSON-RPC tools/call with the session token
FORWARDED = capacity_report.FORWARDED  # sent to a process in front of the owner
BASELINE = "@base"  # the suffix of a bridge path run on the --baseline revision
CLIENT_CORE, SERVER_CORE = 0, 1
SIZES = {"16B": ("increment_counter", 0), "64KB": ("echo", 65536)}


def under_test(path: str) -> str:
    """The name of the process under test on ``path`` (a key of ``Capacity.procs``)."""
    plain, at, base = path.partition("@")
    name = {"direct": "upstream", "rest": "owner", "mcp": "owner", "fwd": "peer"}.get(plain, plain)
    return f"{name}{at}{base}"


def plain(path: str) -> str:
    """The path without its baseline suffix: ``mcp@base`` does what ``mcp`` does."""
    return path.partition("@")[0]


@dataclass
class _Session:
    conn: raw_http.Conn
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
    counters_exact: int  # sessions whose counter read back exact after the run (all of them, or it failed)


class Capacity:
    def __init__(self, workdir: Path, log: Any) -> None:
        self.workdir, self.log = workdir, log
        self.procs: dict[str, Proc] = {}
        self.seeds = itertools.count(1000, 7)
        self.crews: dict[tuple[str, int], list[_Session]] = {}
        self.expected: dict[tuple[str, str], bytes] = {}  # (workload, path) -> the first valid answer

    # -- processes --------------------------------------------------------------------------------

    def start(self, paths: list[str], baseline: Path | None = None) -> None:
        pin = ["taskset", "-c"]
        self.procs["upstream"] = up = procs.start_bare_upstream(self.workdir, [*pin, str(CLIENT_CORE)])
        if "nginx" in paths:
            self.procs["nginx"] = nginx.start(self.workdir, up.url, SERVER_CORE)
        saved = procs.BRIDGE
        try:
            for suffix, tree in (("", None), (BASELINE, baseline)):
                procs.BRIDGE = [*pin, str(SERVER_CORE), *saved]
                env = None
                if tree is not None:  # -P: not the checkout's bridge/ from the working directory
                    procs.BRIDGE = [*pin, str(SERVER_CORE), sys.executable, "-P", "-m", "bridge"]
                    env = {"PYTHONPATH": str(tree)}
                if {f"{p}{suffix}" for p in (*BRIDGE_PATHS, *FORWARDED)} & set(paths):
                    name = f"owner{suffix}"
                    self.procs[name] = procs.start_bridge(self.workdir, up.url, name=name, env=env)
                if f"fwd{suffix}" in paths:
                    name = f"peer{suffix}"
                    self.procs[name] = procs.start_bridge(self.workdir, up.url, name=name, env=env)
        finally:
            procs.BRIDGE = saved
        owner = self.procs.get("owner", up)  # the forward relay is in front of the owner replica
        relays = {
            "relay": ("bytes", up),
            "splice": ("splice", up),
            "asgi": ("asgi", up),
            "fwd-splice": ("forward", owner),
        }
        for name, (mode, target) in relays.items():
            if name in paths:
                self.procs[name] = relay = procs.start_relay(self.workdir, target.url, mode)
                for task in Path(f"/proc/{relay.pid}/task").iterdir():
                    os.sched_setaffinity(int(task.name), {SERVER_CORE})
        os.sched_setaffinity(0, {CLIENT_CORE})
        self.log("capacity: " + ", ".join(f"{n} {p.url} (pid {p.pid})" for n, p in self.procs.items()))

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()

    # -- sessions ---------------------------------------------------------------------------------

    def _target(self, path: str) -> Proc:
        return self.procs[under_test(path)]

    async def _connect(self, proc: Proc) -> raw_http.Conn:
        host, port = proc.url.removeprefix("http://").rsplit(":", 1)
        _, conn = await asyncio.get_running_loop().create_connection(raw_http.Conn, host, int(port))
        return conn

    async def crew(self, path: str, sessions: int) -> list[_Session]:
        """``sessions`` seeded sessions on ``path``, each with its own connection; kept across rounds."""
        if (path, sessions) in self.crews:
            return self.crews[(path, sessions)]
        out = []
        kind = plain(path)
        owned = kind in BRIDGE_PATHS or kind in FORWARDED
        seeder = self.procs[f"owner{path[len(kind) :]}"] if owned else self._target(path)
        for _ in range(sessions):
            seed = next(self.seeds)
            body = orjson.dumps({"responses_create_params": {"input": []}, "initial_count": seed})
            seed_conn = await self._connect(seeder)
            host = {"host": seeder.url.removeprefix("http://")}
            status, raw, cookies = await seed_conn.call(raw_http.request("/seed_session", body, host))
            if status != 200:
                raise BenchError(f"{path}: seed answered {status}: {raw[:200]!r}")
            if kind in FLOORS:
                headers = {**host, "cookie": "; ".join(c.decode().split(";", 1)[0] for c in cookies)}
                conn = seed_conn
            else:
                target = self._target(path).url.removeprefix("http://")
                headers = {"host": target, TOKEN_HEADER: orjson.loads(raw)["mcp"]["headers"][TOKEN_HEADER]}
                if kind != "rest":
                    headers["accept"] = "application/json, text/event-stream"
                conn = seed_conn if kind not in FORWARDED else await self._connect(self._target(path))
                if conn is not seed_conn:
                    seed_conn.transport.close()
            out.append(_Session(conn, seed, headers))
        self.crews[(path, sessions)] = out
        return out

    def _call_bytes(self, path: str, session: _Session, tool: str, arguments: dict[str, Any]) -> bytes:
        if plain(path) in MCP_PATHS:
            body = orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                }
            )
            return raw_http.request("/mcp", body, session.headers)
        return raw_http.request(f"/{tool}", orjson.dumps(arguments), session.headers)

    @staticmethod
    def _value(path: str, status: int, raw: bytes) -> Any:
        """The tool's JSON answer; BenchError on any error."""
        if status != 200:
            raise BenchError(f"{path}: HTTP {status}: {raw[:300]!r}")
        message = orjson.loads(raw)
        if plain(path) not in MCP_PATHS:
            return message
        result = message.get("result") or {}
        if "error" in message or result.get("isError"):
            raise BenchError(f"{path}: {message.get('error') or result.get('content')}")
        return result.get("structuredContent")

    # -- one run ----------------------------------------------------------------------------------

    async def run(self, workload: str, path: str, sessions: int, calls: int, round_: int) -> Run:
        crew = await self.crew(path, sessions)
        tool, size = SIZES[workload]
        arguments: dict[str, Any] = {"count": 1} if tool == "increment_counter" else {"data": "x" * size}
        want = {"success": True} if tool == "increment_counter" else arguments
        requests = [self._call_bytes(path, s, tool, arguments) for s in crew]
        key = (workload, path)
        go = asyncio.Event()
        clock = time.perf_counter

        async def one(session: _Session, request: bytes) -> None:
            await go.wait()
            call, append, expected = session.conn.call, session.latencies.append, self.expected.get(key)
            for _ in range(calls):
                t0 = clock()
                status, raw, _ = await call(request)
                append(clock() - t0)
                if raw != expected:  # the first answer, or an answer unlike it: parse and check it
                    if self._value(path, status, raw) != want:
                        raise BenchError(f"{path} {tool}: answered {raw[:200]!r}")
                    expected = self.expected.setdefault(key, raw)
            if tool == "increment_counter":
                session.count += calls

        for session in crew:  # a server may close a connection idle between rounds (keep-alive timeout)
            session.latencies = []
            if session.conn.closed:
                session.conn = await self._connect(self._target(path))
        tasks = [asyncio.create_task(one(s, r)) for s, r in zip(crew, requests, strict=True)]
        await asyncio.sleep(0)
        watched = {name: p for name, p in self.procs.items()}
        cpu0 = {name: p.cpu() for name, p in watched.items()}
        client0, started = time.process_time(), clock()
        go.set()
        try:
            await asyncio.gather(*tasks)
        except BenchError as exc:  # name the path and what its process said
            tail = self._target(path).log_tail(5)
            raise BenchError(f"{path}, {sessions} sessions, round {round_}: {exc}\n{tail}") from exc
        wall = clock() - started
        client1 = time.process_time()
        cpu1 = {name: p.cpu() for name, p in watched.items()}
        exact = 0
        for session in crew:  # read back through the same path: the counter must be exact
            status, raw, _ = await session.conn.call(self._call_bytes(path, session, "get_counter_value", {}))
            value = self._value(path, status, raw)
            if value != {"count": session.seed + session.count}:
                raise BenchError(
                    f"{path}: session seeded {session.seed} read back {value!r} after {session.count} increments"
                )
            exact += 1
        total = sessions * calls
        used = {name: cpu1[name] - cpu0[name] for name in watched}
        used["client"] = client1 - client0
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
            busy=busy, saturated=saturated, loadavg=os.getloadavg()[0], counters_exact=exact,
        )  # fmt: skip


def round_order(paths: list[str], r: int) -> list[str]:
    """The paths of round ``r``: the order rotated by one each round, so load from other jobs hits
    every path alike. A path and its baseline run back to back, the first of the two taking turns
    round by round, so the machine's drift between runs does not favour either."""
    units = [[p, f"{p}{BASELINE}"] if f"{p}{BASELINE}" in paths else [p] for p in paths if "@" not in p]
    units = units[r % len(units) :] + units[: r % len(units)]
    return [path for unit in units for path in (unit[::-1] if r % 2 else unit)]


def calls_for(total: int, sessions: int) -> int:
    return max(20, total // sessions)


async def amain(args: argparse.Namespace) -> int:
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if args.baseline:
        paths += [f"{p}{BASELINE}" for p in paths if p in BRIDGE_PATHS]
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    size_levels = [int(x) for x in args.size_levels.split(",") if x.strip()]
    when, load0 = dt.datetime.now(dt.UTC), os.getloadavg()
    log = (lambda text: print(text, file=sys.stderr, flush=True)) if not args.silent else (lambda text: None)
    runs: list[Run] = []
    error = ""
    with tempfile.TemporaryDirectory(prefix="gym-mcp-capacity-") as tmp:
        bench = Capacity(Path(tmp), log)
        try:
            baseline = (
                revisions.unpack_bridge(args.baseline, Path(tmp) / "baseline") if args.baseline else None
            )
            bench.start(paths, baseline)
            plan = [("16B", n, args.calls) for n in levels] + [
                ("64KB", n, args.size_calls) for n in size_levels
            ]
            for workload, sessions, total in plan:
                for path in paths:  # warm-up, discarded
                    await bench.run(workload, path, sessions, calls_for(total, sessions) // 4 + 1, -1)
                for r in range(args.rounds):
                    for path in round_order(paths, r):
                        run = await bench.run(workload, path, sessions, calls_for(total, sessions), r)
                        runs.append(run)
                        log(
                            f"capacity: {workload:>4} {sessions:>3} sessions r{r + 1:<2} {path:<6} {run.calls_per_s:7.0f} calls/s "
                            f"p99 {run.p99_ms:7.2f} ms load {run.loadavg:.1f}"
                            + (f" SATURATED {run.saturated}" if run.saturated else "")
                        )
        except BenchError as exc:
            error = str(exc)
        finally:
            bench.stop()
    rows = capacity_report.summarize([asdict(r) for r in runs], args.seed)
    report = {
        "when_utc": when.isoformat(),
        "command": "python -m benchmarks.capacity " + " ".join(args.argv),
        "machine": {
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "kernel": platform.release(),
            "nginx": nginx.version(),
        },
        "loadavg_at_start": load0,
        "loadavg_at_end": os.getloadavg(),
        "cores": {"bridge, nginx": SERVER_CORE, "client, upstream": CLIENT_CORE},
        "checkout": revisions.describe_checkout(),
        "baseline": revisions.named(args.baseline) if args.baseline else None,
        "args": {
            k: str(v) if isinstance(v, Path) else v
            for k, v in vars(args).items()
            if k not in ("argv", "from_json")
        },
        "correct": not error,
        "error": error,
        "summary": rows,
        "runs": [asdict(r) for r in runs],
    }
    print(capacity_report.render(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"json: {args.json}")
    _plot(report, args.plot)
    if error:
        print(f"benchmarks.capacity: FAILED: {error}", file=sys.stderr)
    return 0 if not error else 1


def from_json(args: argparse.Namespace) -> int:
    """The table and plot of a saved run, its summary computed again from its rounds."""
    report = json.loads(args.from_json.read_text())
    report["summary"] = capacity_report.summarize(report["runs"], report["args"]["seed"])
    print(capacity_report.render(report))
    _plot(report, args.plot)
    return 0 if report["correct"] else 1


def _plot(report: dict[str, Any], path: Path | None) -> None:
    if path:
        why_not = capacity_report.plot(report["summary"], path)
        print(f"plot: {path}" if why_not is None else f"plot: not written: {why_not}")


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__.split("\n\n")[0])
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma list of {', '.join(PATHS)}")
    p.add_argument("--levels", default="1,16,64,256", help="concurrent sessions, 16-byte workload")
    p.add_argument("--size-levels", default="1,16", help="concurrent sessions, 64 KiB workload; '' to skip")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument(
        "--calls",
        type=int,
        default=2000,
        help="calls per run, 16-byte workload (split over sessions, at least 20 each)",
    )
    p.add_argument("--size-calls", type=int, default=400, help="calls per run, 64 KiB workload")
    p.add_argument("--seed", type=int, default=1, help="bootstrap random seed")
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also run rest, mcp and fwd on the bridge of git revision REV, in the same rounds",
    )
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "capacity.json")
    p.add_argument(
        "--plot",
        type=lambda text: Path(text) if text else None,
        default=procs.ROOT / "docs" / "performance-capacity.png",
        help="the plot's file; '' for none (--quick: none unless given)",
    )
    p.add_argument("--from-json", type=Path, help="render a saved run's table and plot; run nothing")
    p.add_argument("--silent", action="store_true", help="no per-run progress lines on stderr")
    p.add_argument("--quick", action="store_true", help="2 rounds, 1 and 16 sessions, 64 KiB at 1, few calls")
    args = p.parse_args(argv)
    if args.quick:
        for key, value in {
            "rounds": 2,
            "levels": "1,16",
            "size_levels": "1",
            "calls": 200,
            "size_calls": 40,
            "plot": None,
        }.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
    if shutil.which("taskset") is None:
        p.error("taskset (util-linux) is required")
    return args


def main(argv: list[str] | None = None) -> int:
    import uvloop

    args = parse_args(argv)
    # the command line as given, for the report (``benchmarks.run capacity`` passes it without that word)
    args.argv = sys.argv[1:] if argv is None else argv
    if args.from_json:
        return from_json(args)
    return uvloop.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
