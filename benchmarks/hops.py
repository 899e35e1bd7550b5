"""The hop and the tail: a synchronous keep-alive client through the bridge, straight to the owner
replica, through a replica that does not own the session (forwarded), and spread over 2 and 3
replicas as a Service without affinity spreads it -- each as a ratio to direct HTTP in the same round.

How harness loops call tools: one call, wait for the answer, next call. The client here is
``http.client`` (one keep-alive connection per session and replica, TCP_NODELAY, request head and
body in one send), one thread per session; ``sessions`` of them run at once (1 and 16 by default).
Every replica is a ``gym-mcp-bridge serve`` in external mode on the one Gym upstream (same secret,
its own advertise URL; default peers: any loopback port), so every path reaches the same server.

Paths (``HOP_PATHS``):

* ``direct``: ``POST /increment_counter`` to the upstream with the session's cookie (the reference);
* ``relay``: the same requests through a byte relay in its own process (``benchmarks/relay.py``, a
  control: what any second process on the path costs without doing any HTTP work);
* ``asgi``: the same requests through the bridge's HTTP stack with no MCP work (``benchmarks/relay.py
  --mode asgi``: uvicorn with the bridge's protocol, ``read_body``, ``Forwarding.relay``; a control:
  what any request through the bridge pays before the bridge's own work);
* ``owner``: ``POST /mcp`` (a stateless ``tools/call``, handshake era, token header) to the replica
  that seeded the session;
* ``fwd``: the same call to another replica, which relays it to the owner (every call forwarded);
* ``svc2`` / ``svc3``: sessions seeded round robin over 2 / 3 replicas, each call sent to the next
  replica in turn, so (N-1)/N of the calls are forwarded.

Rounds are interleaved: each round runs every path once, in an order that rotates, so a burst of
load from other jobs on the machine hits every path alike; ratios are taken within a round, then the
median over rounds. CPU per call is read from ``/proc/<pid>/task/*/schedstat`` for the upstream and
each replica separately, over the timed window only. Correctness: every session's counter is read
back through its path at the end and must equal its seed plus its calls; any other answer (an HTTP
error, an ``isError`` result) fails the run with its text.
"""

from __future__ import annotations

import http.client
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.clients import TOKEN_HEADER, seed_body
from benchmarks.hops_report import CONTROL_PATHS, HOP_PATHS, HopRun, plot, summarize, table
from benchmarks.procs import BenchError, Proc

_JSON = {"content-type": "application/json"}
_MCP = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@dataclass
class _Session:
    seed: int
    targets: list[tuple[http.client.HTTPConnection, str, dict[str, str]]]  # (connection, path, headers)
    latencies: list[float] = field(default_factory=list)
    turn: int = 0


def _connect(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=120)


def _post(
    conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes, Any]:
    conn.request("POST", path, body, headers)
    response = conn.getresponse()
    return response.status, response.read(), response


class HopBench:
    """One upstream and up to three replicas (``Proc``); runs the paths, returns ``HopRun`` rows."""

    def __init__(
        self,
        upstream: Proc,
        replicas: list[Proc],
        log: Callable[[str], None],
        relays: dict[str, Proc] | None = None,
    ) -> None:
        self.upstream = upstream
        self.replicas = replicas
        self.relays = relays or {}  # control path ("relay", "asgi") -> the relay serving it
        self.log = log
        self.seeds = itertools.count(5000, 7)
        self.rpc_ids = itertools.count(1)

    def _replicas_for(self, path: str) -> list[Proc]:
        return {"owner": self.replicas[:1], "fwd": self.replicas[:2], "svc2": self.replicas[:2]}.get(
            path, self.replicas[:3]
        )

    def _open(self, path: str, index: int) -> _Session:
        seed = next(self.seeds)
        if path in CONTROL_PATHS:
            if path != "direct" and path not in self.relays:
                raise BenchError(f"hops {path}: its relay was not started")
            conn = _connect(self.relays[path].url if path != "direct" else self.upstream.url)
            status, raw, response = _post(conn, "/seed_session", seed_body(seed), _JSON)
            if status != 200:
                raise BenchError(f"hops {path}: seed answered {status}: {raw[:200]!r}")
            cookie = "; ".join(c.split(";", 1)[0] for c in response.headers.get_all("set-cookie") or [])
            return _Session(seed, [(conn, "/increment_counter", {**_JSON, "cookie": cookie})])
        replicas = self._replicas_for(path)
        owner = replicas[index % len(replicas)] if path.startswith("svc") else replicas[0]
        conns = {r.name: _connect(r.url) for r in replicas}
        status, raw, _ = _post(conns[owner.name], "/seed_session", seed_body(seed), _JSON)
        if status != 200:
            raise BenchError(f"hops {path}: seed answered {status}: {raw[:200]!r}")
        headers = {**_MCP, TOKEN_HEADER: orjson.loads(raw)["mcp"]["headers"][TOKEN_HEADER]}
        if path == "owner":
            order = [owner]
        elif path == "fwd":
            order = [replicas[1]]
        else:  # the next replica in turn after the owner, so the first call is forwarded too
            start = replicas.index(owner) + 1
            order = [replicas[(start + i) % len(replicas)] for i in range(len(replicas))]
        return _Session(seed, [(conns[r.name], "/mcp", headers) for r in order])

    def _call(self, session: _Session, path: str, tool: str, arguments: dict[str, Any]) -> Any:
        conn, target, headers = session.targets[session.turn % len(session.targets)]
        session.turn += 1
        if path in CONTROL_PATHS:
            status, raw, _ = _post(conn, f"/{tool}", orjson.dumps(arguments), headers)
            if status != 200:
                raise BenchError(f"hops {path}: {tool} answered {status}: {raw[:200]!r}")
            return orjson.loads(raw)
        body = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": next(self.rpc_ids),
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
        )
        status, raw, _ = _post(conn, target, body, headers)
        if status != 200:
            raise BenchError(f"hops {path}: HTTP {status}: {raw[:300]!r}")
        message = orjson.loads(raw)
        result = message.get("result") or {}
        if "error" in message or result.get("isError"):
            raise BenchError(f"hops {path}: {message.get('error') or result.get('content')}")
        return result.get("structuredContent")

    def run(self, path: str, sessions: int, calls: int, round_: int) -> HopRun:
        opened = [self._open(path, i) for i in range(sessions)]
        procs: dict[str, Proc] = {"upstream": self.upstream}
        if path in self.relays:
            procs[self.relays[path].name] = self.relays[path]
        elif path != "direct":
            procs.update({r.name: r for r in self._replicas_for(path)})
        ready = threading.Barrier(sessions + 1)
        done = threading.Barrier(sessions + 1)
        errors: list[BaseException] = []

        def worker(session: _Session) -> None:
            clock, append = time.perf_counter, session.latencies.append
            try:
                ready.wait()
                for _ in range(calls):
                    t0 = clock()
                    value = self._call(session, path, "increment_counter", {"count": 1})
                    append(clock() - t0)
                    if value != {"success": True}:
                        raise BenchError(f"hops {path}: increment_counter answered {value!r}")
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
            finally:
                done.wait()

        threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in opened]
        for thread in threads:
            thread.start()
        ready.wait()
        cpu0 = {name: p.cpu() for name, p in procs.items()}
        client0, started = time.process_time(), time.perf_counter()
        done.wait()
        wall = time.perf_counter() - started
        client1 = time.process_time()
        cpu1 = {name: p.cpu() for name, p in procs.items()}
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        for session in opened:  # read back through the same path: the counter must be exact
            value = self._call(session, path, "get_counter_value", {})
            if value != {"count": session.seed + calls}:
                raise BenchError(
                    f"hops {path}: session seeded {session.seed} read back {value!r} after {calls} calls"
                )
            for conn, _, _ in session.targets:
                conn.close()
        total = sessions * calls
        latencies = sorted(x for s in opened for x in s.latencies)
        return HopRun(
            path=path,
            sessions=sessions,
            round=round_,
            calls=total,
            calls_per_s=total / wall,
            p50_ms=latencies[len(latencies) // 2] * 1e3,
            p99_ms=latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))] * 1e3,
            cpu_ms_per_call={name: (cpu1[name] - cpu0[name]) / total * 1e3 for name in procs},
            client_cpu_ms_per_call=(client1 - client0) / total * 1e3,
            loadavg=os.getloadavg()[0],
        )

    def rounds(self, paths: list[str], levels: list[tuple[int, int]], rounds: int) -> list[HopRun]:
        """``levels``: (sessions, calls per session). Warm-up first (discarded), then the rounds."""
        return interleave([(p, self, p) for p in paths], levels, rounds, self.log)


Variant = tuple[str, HopBench, str]  # (name in the results, the bench whose replicas it uses, path)


def interleave(
    variants: list[Variant], levels: list[tuple[int, int]], rounds: int, log: Callable[[str], None]
) -> list[HopRun]:
    """Every variant once per round, the order rotating each round; a discarded warm-up first."""
    for _, bench, path in variants:
        bench.run(path, 2, 50, -1)
    out = []
    for sessions, calls in levels:
        for r in range(rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for name, bench, path in order:
                run = bench.run(path, sessions, calls, r)
                run.path = name
                out.append(run)
                log(
                    f"bench: hops {sessions:>2} sessions r{r + 1} {name:<12} {run.calls_per_s:7.0f} calls/s "
                    f"p50 {run.p50_ms:6.3f} ms p99 {run.p99_ms:6.3f} ms load {run.loadavg:.1f}"
                )
    return out


# -- entry --------------------------------------------------------------------------------------------


def start(
    workdir: Path, replicas: int, log: Callable[[str], None]
) -> tuple[Proc, list[Proc], dict[str, Proc]]:
    """The upstream, ``replicas`` bridges on it and the two control relays to it
    (``benchmarks/relay.py``: path -> relay), their files in ``workdir/hops``."""
    from benchmarks import procs

    workdir = workdir / "hops"
    workdir.mkdir(exist_ok=True)
    upstream = procs.start_upstream(workdir)
    started: list[Proc] = []
    relays: dict[str, Proc] = {}
    try:
        started = start_replicas(workdir, upstream, replicas, "replica")
        relays["relay"] = procs.start_relay(workdir, upstream.url, "bytes")
        relays["asgi"] = procs.start_relay(workdir, upstream.url, "asgi")
    except BaseException:
        for proc in [*started, *relays.values(), upstream]:
            proc.stop()
        raise
    urls = ", ".join(f"{path} {proc.url}" for path, proc in relays.items())
    log(f"bench: hops: upstream {upstream.url}, replicas {', '.join(p.url for p in started)}, {urls}")
    return upstream, started, relays


def start_replicas(
    workdir: Path, upstream: Proc, count: int, name: str, tree: Path | None = None
) -> list[Proc]:
    """``count`` bridges on ``upstream``; from the checkout at ``tree`` (its ``bridge`` package first
    on the path) when given, for a before/after comparison in one run."""
    from benchmarks import procs

    saved = procs.BRIDGE
    if tree is not None:
        code = f"import sys; sys.path.insert(0, {str(tree)!r}); from bridge.commands.cli import main; sys.exit(main())"
        procs.BRIDGE = [sys.executable, "-c", code]
    started: list[Proc] = []
    try:
        for i in range(count):
            started.append(procs.start_bridge(workdir, upstream.url, name=f"{name}-{i}"))
    except BaseException:
        for proc in started:
            proc.stop()
        raise
    finally:
        procs.BRIDGE = saved
    return started


def parse_levels(text: str) -> list[tuple[int, int]]:
    """``"1x1000,16x100"`` -> [(1, 1000), (16, 100)]: sessions x calls per session."""
    out = []
    for part in text.split(","):
        sessions, _, calls = part.strip().partition("x")
        out.append((int(sessions), int(calls)))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import datetime as dt
    import json
    import tempfile
    from dataclasses import asdict

    from benchmarks import procs

    p = argparse.ArgumentParser(prog="python -m benchmarks.hops", description=__doc__.split("\n\n")[0])
    p.add_argument("--paths", default=",".join(HOP_PATHS))
    p.add_argument("--levels", default="1x1000,16x100", help="sessions x calls per session, comma list")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "hops.json")
    p.add_argument("--plot", type=Path, default=None, help="e.g. docs/performance-hops.png")
    p.add_argument(
        "--compare-tree",
        type=Path,
        default=None,
        help="another checkout (e.g. a git worktree of the previous commit): two replicas run from it "
        "and its owner and fwd paths join the same interleaved rounds as owner@TAG, fwd@TAG",
    )
    p.add_argument("--compare-tag", default="before")
    args = p.parse_args(argv)
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    if "direct" not in paths:
        paths.insert(0, "direct")
    when = dt.datetime.now(dt.UTC)
    load0 = os.getloadavg()

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="gym-mcp-hops-") as tmp:
        upstream, replicas, relays = start(Path(tmp), 3, log)
        replicas += relays.values()  # stopped with them
        try:
            bench = HopBench(upstream, replicas[:3], log, relays)
            variants: list[Variant] = [(p, bench, p) for p in paths]
            if args.compare_tree is not None:
                other = start_replicas(Path(tmp), upstream, 2, args.compare_tag, args.compare_tree.resolve())
                replicas += other
                compared = HopBench(upstream, other, log)
                variants += [(f"{p}@{args.compare_tag}", compared, p) for p in ("owner", "fwd")]
            runs = interleave(variants, parse_levels(args.levels), args.rounds, log)
        finally:
            for proc in [*replicas, upstream]:
                proc.stop()
    rows = summarize(runs)
    print(
        f"\ngym-mcp-bridge hops benchmark, {when:%Y-%m-%d %H:%M} UTC, load avg {load0[0]:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at end"
    )
    print(table(rows))
    plot_error = plot(rows, args.plot) if args.plot else None
    if plot_error:
        print(f"plot skipped: {plot_error}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "when_utc": when.isoformat(),
            "command": "python -m benchmarks.hops " + " ".join(sys.argv[1:] if argv is None else argv),
            "loadavg_at_start": load0,
            "loadavg_at_end": os.getloadavg(),
            "summary": rows,
            "runs": [asdict(r) for r in runs],
        }
        args.json.write_text(json.dumps(report, indent=2))
        print(f"json: {args.json}")
    print("correctness: every session final counter exact")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
