"""The training run through the bridge: rollouts never closed, for as long as a run lasts, and
thousands in flight at once; every reward checked, exit 1 unless every rollout is exact.

    make bench ARGS="soak [--rollouts 1000000] [--minutes 60] [--workers 8] [--retry-every N] [--json FILE]"
    make bench ARGS="inflight [--levels 256,1024,4096] [--per-worker 2] [--rounds 2] [--json FILE]"

A rollout, each request on a new connection: ``/seed_session`` (a random ``initial_count``) -> MCP
``initialize`` -> two ``tools/call increment_counter`` -> ``/verify`` expecting initial + 2. Reward
1.0 is exact, another reward wrong, a 503/429 refused, anything else an error. ``--retry-every N``
sends every Nth rollout's first call twice (a client retrying a lost answer). ``soak``: one bridge
on its defaults, sampled every ``--sample-s``. ``inflight``: two replicas, each request to one at
random, against the same rollouts through Gym's REST surface alone. The bridges start with a soft
``RLIMIT_NOFILE`` of 1,024; ``GYM_MCP_BRIDGE_*`` variables reach them and are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvloop

from benchmarks import client, procs, report
from benchmarks.client import TOKEN_HEADER
from benchmarks.procs import BenchError, Proc
from benchmarks.report import OUTCOMES, scrape, summarize_level, summarize_soak

PROTOCOL = "2025-06-18"
BRIDGE_NOFILE = 1024
_TOOL = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "add 1 twice"}], "tools": [
    {"type": "function", "name": "increment_counter", "parameters": _TOOL, "strict": True},
    {"type": "function", "name": "get_counter_value", "parameters": {"type": "object"}, "strict": True},
]}}  # fmt: skip
RESPONSE = {
    "id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
}  # fmt: skip
INITIALIZE = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "gym-mcp-bridge-soak", "version": "0"},
}})  # fmt: skip
CALLS = [client.tools_call("increment_counter", {"count": 1}, i) for i in (1, 2)]
# Started as ``python -m bridge`` is, its soft descriptor limit first lowered to a login shell's.
LIMITED_BRIDGE = [
    sys.executable,
    "-c",
    "import resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, (min({BRIDGE_NOFILE}, hard), hard)); "
    "from bridge.commands.cli import main; sys.exit(main())",
]


class Failed(Exception):
    def __init__(self, kind: str, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.kind, self.reason, self.detail = kind, reason, detail


Target = tuple[str, int]  # host, port


def target(proc: Proc) -> Target:
    host, port = proc.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def exchange(
    to: Target, path: str, body: bytes, headers: dict[str, str], step: str, timeout_s: float = 60.0
) -> tuple[bytes, list[bytes], str | None]:
    """One request on a new connection, closed after its answer: its body, its ``Set-Cookie`` values
    and its ``Mcp-Session-Id``. Failed unless the answer is 200 within ``timeout_s``."""
    transport: Any = None
    try:
        async with asyncio.timeout(timeout_s):
            loop = asyncio.get_running_loop()
            transport, conn = await loop.create_connection(client.Conn, *to)
            head = {"host": f"{to[0]}:{to[1]}", **headers}
            status, raw, cookies = await conn.call(client.request(path, body, head))
    except TimeoutError:
        raise Failed("error", f"{step} timed out", f"no answer within {timeout_s:g} s") from None
    finally:
        if transport is not None:
            transport.close()
    if status != 200:
        kind = "refused" if status in (429, 503) else "error"
        raise Failed(kind, f"{step} {status}", raw[:300].decode(errors="replace"))
    return raw, cookies, conn.mcp_session


@dataclass
class Rollouts:
    """Full rollouts against ``targets`` (each request to one picked at random): through the bridge
    (``gym=False``) or Gym's REST surface alone (``gym=True``); outcomes and reasons counted."""

    targets: list[Target]
    gym: bool = False
    timeout_s: float = 60.0  # budget of one request
    retry_every: int = 0  # every Nth rollout sends its first tools/call twice (a client retrying)
    started: int = 0
    retried: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    outcomes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def pick(self) -> Target:
        return self.targets[0] if len(self.targets) == 1 else self.rng.choice(self.targets)

    async def one(self) -> str:
        """One rollout, its outcome counted and returned (``OUTCOMES``)."""
        self.started += 1
        retry = self.retry_every > 0 and self.started % self.retry_every == 0
        self.retried += retry
        try:
            await (self._gym() if self.gym else self._bridge(retry))
            outcome = "exact"
        except Failed as failed:
            outcome = failed.kind
            self._note(failed.reason, failed.detail)
        except (OSError, BenchError, ValueError, KeyError, TypeError) as exc:
            outcome = "error"
            self._note(type(exc).__name__, str(exc)[:300])
        self.outcomes[outcome] += 1
        return outcome

    def tally(self) -> dict[str, Any]:
        return {
            "outcomes": {k: self.outcomes.get(k, 0) for k in OUTCOMES},
            "retried_rollouts": self.retried,
            "reasons": dict(self.reasons),
            "examples": self.examples,
        }

    async def _post(self, to: Target, path: str, body: bytes, headers: dict[str, str], step: str) -> Any:
        return await exchange(to, path, body, headers, step, self.timeout_s)

    def _note(self, reason: str, detail: str) -> None:
        self.reasons[reason] += 1
        self.examples.setdefault(reason, detail)

    def _seed(self) -> tuple[int, bytes]:
        initial = self.rng.randrange(0, 1000)
        return initial, orjson.dumps({**ROW, "initial_count": initial})

    @staticmethod
    def _reward(raw: bytes, initial: int) -> None:
        reward = orjson.loads(raw).get("reward")
        if reward != 1.0:
            raise Failed(
                "wrong", f"verify reward {reward}", f"initial_count {initial}, expected {initial + 2}"
            )

    def _verify_body(self, initial: int) -> bytes:
        return orjson.dumps(
            {**ROW, "initial_count": initial, "response": RESPONSE, "expected_count": initial + 2}
        )

    async def _bridge(self, retry: bool) -> None:
        initial, seed = self._seed()
        raw, _, _ = await self._post(self.pick(), "/seed_session", seed, {}, "seed")
        token = {TOKEN_HEADER: orjson.loads(raw)["mcp"]["headers"][TOKEN_HEADER]}
        mcp = {**token, "accept": "application/json, text/event-stream"}
        _, _, mcp_session = await self._post(self.pick(), "/mcp", INITIALIZE, mcp, "initialize")
        mcp["mcp-protocol-version"] = PROTOCOL
        if mcp_session:
            mcp["mcp-session-id"] = mcp_session
        for i, call in [(1, CALLS[0]), (1, CALLS[0]), (2, CALLS[1])] if retry else enumerate(CALLS, 1):
            raw, _, _ = await self._post(self.pick(), "/mcp", call, mcp, f"tools/call {i}")
            try:
                result = client.decode_rpc("bridge", 200, raw)
            except BenchError as exc:
                raise Failed("error", f"tools/call {i} failed", str(exc)[:300]) from exc
            if result != {"success": True}:
                raise Failed("error", f"tools/call {i} answered", repr(result)[:300])
        raw, _, _ = await self._post(self.pick(), "/verify", self._verify_body(initial), token, "verify")
        self._reward(raw, initial)

    async def _gym(self) -> None:
        initial, seed = self._seed()
        to = self.targets[0]
        _, cookies, _ = await self._post(to, "/seed_session", seed, {}, "seed")
        cookie = {"cookie": "; ".join(c.decode().split(";", 1)[0] for c in cookies)}
        for i in (1, 2):
            raw, _, _ = await self._post(to, "/increment_counter", b'{"count":1}', cookie, f"increment {i}")
            if orjson.loads(raw) != {"success": True}:
                raise Failed("error", f"increment {i} answered", raw[:300].decode(errors="replace"))
        raw, _, _ = await self._post(to, "/verify", self._verify_body(initial), cookie, "verify")
        self._reward(raw, initial)


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def settings_given() -> dict[str, str]:
    """The bridge settings this run changes from the defaults (``GYM_MCP_BRIDGE_*`` but the secret)."""
    return {k: v for k, v in os.environ.items() if k.startswith("GYM_MCP_BRIDGE_") and "SECRET" not in k}


def start(workdir: Path, replicas: int) -> tuple[Proc, list[Proc]]:
    """The Gym upstream and ``replicas`` bridges on it, each with a soft descriptor limit of 1,024."""
    upstream = procs.start_upstream(workdir)
    bridges: list[Proc] = []
    try:
        for i in range(replicas):
            bridges.append(procs.start_bridge(workdir, upstream.url, f"bridge-{i}", command=LIMITED_BRIDGE))
    except BaseException:
        for proc in [*bridges, upstream]:
            proc.stop()
        raise
    return upstream, bridges


# -- soak -------------------------------------------------------------------------------------------


async def soak(args: argparse.Namespace, upstream: Proc, bridge: Proc) -> dict[str, Any]:
    """``--workers`` loops of rollouts until ``--rollouts`` or ``--minutes``, sampled as they run."""
    rollouts = Rollouts([target(bridge)], timeout_s=args.timeout_s, retry_every=args.retry_every)
    me = os.getpid()
    done: list[float] = []
    samples: list[dict[str, Any]] = []
    stop = asyncio.Event()
    t0 = time.monotonic()
    deadline = t0 + args.minutes * 60

    async def take() -> None:
        now, prev = time.monotonic() - t0, samples[-1] if samples else None
        s: dict[str, Any] = {
            "t_s": now, "rollouts": len(done), "not_exact": len(done) - rollouts.outcomes["exact"],
            "rollouts_per_s": (len(done) - prev["rollouts"]) / (now - prev["t_s"]) if prev else 0.0,
            "bridge_rss_kb": bridge.memory()["rss_kb"], "bridge_fds": fds(bridge.pid),
            "upstream_rss_kb": upstream.memory()["rss_kb"], "bridge_cpu_s": bridge.cpu(),
            "upstream_cpu_s": upstream.cpu(), "client_cpu_s": procs.cpu_seconds(me),
            "metrics": await asyncio.to_thread(scrape, bridge.url),
        }  # fmt: skip
        samples.append(s)
        print(report.render_sample(s), flush=True)

    async def worker() -> None:
        while not stop.is_set() and rollouts.started < args.rollouts and time.monotonic() < deadline:
            outcome = await rollouts.one()
            done.append(time.monotonic())
            if outcome != "exact" and len(done) - rollouts.outcomes["exact"] >= args.stop_after:
                stop.set()

    async def sampler() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.sample_s)
            if not bridge.alive():
                stop.set()
            await take()

    await take()
    task = asyncio.create_task(sampler())
    await asyncio.gather(*(worker() for _ in range(args.workers)))
    stop.set()
    await task
    return summarize_soak(done, t0, samples, rollouts.tally())


# -- in flight --------------------------------------------------------------------------------------


async def level_run(
    path: str, level: int, per_worker: int, rollouts: Rollouts, measured: dict[str, Callable[[], float]]
) -> dict[str, Any]:
    """``level`` rollouts at once, ``per_worker`` each; latency per rollout and CPU per process."""
    latencies: list[float] = []
    before = Counter(rollouts.outcomes)

    async def worker() -> None:
        for _ in range(per_worker):
            t = time.perf_counter()
            await rollouts.one()
            latencies.append(time.perf_counter() - t)

    cpu0 = {name: read() for name, read in measured.items()}
    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(level)))
    seconds = time.monotonic() - t0
    n = len(latencies)
    p50, p99 = np.percentile(np.array(latencies) * 1000, [50, 99])
    return {
        "path": path, "level": level, "rollouts": n, "seconds": seconds, "rollouts_per_s": n / seconds,
        "p50_ms": float(p50), "p99_ms": float(p99), "loadavg": os.getloadavg()[0],
        "outcomes": {k: rollouts.outcomes[k] - before[k] for k in OUTCOMES},
        "cpu_ms_per_rollout": {name: (read() - cpu0[name]) * 1000 / n for name, read in measured.items()},
        "client_cores": (measured["client"]() - cpu0["client"]) / seconds,
    }  # fmt: skip


async def inflight(args: argparse.Namespace, upstream: Proc, bridges: list[Proc]) -> dict[str, Any]:
    """Each level, each round: the bridge and Gym alone, in an order that alternates by round."""
    paths = {
        "bridge": Rollouts(
            [target(b) for b in bridges], timeout_s=args.timeout_s, retry_every=args.retry_every
        ),
        "gym": Rollouts([target(upstream)], gym=True, timeout_s=args.timeout_s),
    }
    me = os.getpid()
    measured: dict[str, Callable[[], float]] = {
        "upstream": upstream.cpu,
        "client": lambda: procs.cpu_seconds(me),
    }
    measured.update({b.name: b.cpu for b in bridges})
    for name, rollouts in paths.items():  # warm-up, untimed
        await level_run(name, min(64, args.levels[0]), 2, rollouts, measured)
    runs = []
    for level in args.levels:
        for r in range(args.rounds):
            for name in ("gym", "bridge") if r % 2 == 0 else ("bridge", "gym"):
                run = {**await level_run(name, level, args.per_worker, paths[name], measured), "round": r}
                runs.append(run)
                print(report.render_run(run), flush=True)
    return {
        "levels": [summarize_level(level, [r for r in runs if r["level"] == level]) for level in args.levels],
        "tally": {name: p.tally() for name, p in paths.items()},
        "runs": runs,
    }


# -- entry ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="make bench ARGS=", description=(__doc__ or "").split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("soak", help="one bridge, never-closed rollouts for --rollouts or --minutes")
    s.add_argument("--rollouts", type=int, default=1_000_000)
    s.add_argument("--minutes", type=float, default=60.0)
    s.add_argument("--workers", type=int, default=8)
    s.add_argument("--sample-s", type=float, default=5.0)
    s.add_argument("--stop-after", type=int, default=100, help="stop once this many rollouts are not exact")
    s.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "soak.json")
    f = sub.add_parser("inflight", help="two replicas, rollouts in flight at each level, against Gym alone")
    f.add_argument("--levels", default="256,1024,4096")
    f.add_argument("--per-worker", type=int, default=2, help="rollouts per in-flight slot per run")
    f.add_argument("--rounds", type=int, default=2)
    f.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "inflight.json")
    for sp in (s, f):
        sp.add_argument("--timeout-s", type=float, default=60.0, help="budget of one request")
        sp.add_argument(
            "--retry-every", type=int, default=0, help="every Nth rollout sends its first tools/call twice "
            "(same JSON-RPC id and Mcp-Session-Id, a new connection: a client retrying); 0: never"
        )  # fmt: skip
    args = p.parse_args(argv)
    if args.mode == "inflight":
        args.levels = [int(x) for x in args.levels.split(",") if x.strip()]
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this client holds thousands of sockets
    out: dict[str, Any] = {
        **report.header(args.mode, argv[1:]), "mode": args.mode,
        "bridge_settings": settings_given(), "bridge_nofile_at_spawn": BRIDGE_NOFILE,
    }  # fmt: skip
    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    with tempfile.TemporaryDirectory(prefix="gym-mcp-soak-") as tmp, runner:
        try:
            upstream, bridges = start(Path(tmp), 1 if args.mode == "soak" else 2)
        except BenchError as exc:
            print(f"benchmarks.soak: {exc}", file=sys.stderr)
            return 1
        try:
            out["bridge_nofile_soft"] = resource.prlimit(bridges[0].pid, resource.RLIMIT_NOFILE)[0]
            out["gym_version"] = upstream.extra.get("gym_version")
            if args.mode == "soak":
                out.update(workers=args.workers, summary=runner.run(soak(args, upstream, bridges[0])))
                tallies = [out["summary"]]
            else:
                out.update(per_worker=args.per_worker, rounds=args.rounds)
                out.update(runner.run(inflight(args, upstream, bridges)))
                tallies = list(out["tally"].values())
        finally:
            for proc in [*bridges, upstream]:
                proc.stop()
    out["loadavg_at_end"] = os.getloadavg()
    out["exact"] = all(t["outcomes"]["exact"] == sum(t["outcomes"].values()) > 0 for t in tallies)
    print((report.render_soak if args.mode == "soak" else report.render_inflight)(out))
    print(f"every reward exact: {out['exact']}")
    report.save(out, args.json)
    return 0 if out["exact"] else 1
