"""Long tool calls: a training step of agentic tools through the bridge against Gym alone.

    make bench ARGS="long-tools [--rollouts 1024,4096] [--min-s 1] [--max-s 120] [--alpha 1.0] [--seed 7]"

Upstream: tests/fixtures/slow_tools_server.py (``slow_step`` sleeps, then counts the call; ``/verify``
scores 1.0 for exactly one). Durations: a Pareto (``--alpha``) truncated to ``--min-s``..``--max-s``,
seeded, the same on every path. A step releases all its rollouts at once (seed, call, verify; a new
connection per request) on Gym's REST surface alone (``gym``), two bridge replicas on their defaults
(``x2``, each request to either) and one (``x1``), started at soft ``RLIMIT_NOFILE`` 1,024. Figures:
makespan and p99 ÷ Gym alone's, rollouts lost, most calls in the upstream at once (its own count),
requests queued in the bridges, bridge CPU per rollout (also at fixed ``--cpu-durations``), bridge
descriptors before/peak/after. Exit 1 unless every rollout is exact.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvloop
from tabulate import tabulate

from benchmarks import client, procs, report, soak
from benchmarks.procs import BenchError, Proc

SERVER = "tests.fixtures.slow_tools_server:SlowToolsServer"
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "run the slow step once"}]}}
VERIFY = orjson.dumps({**ROW, "response": soak.RESPONSE, "expected_count": 1})
MCP = {"accept": client.MCP_ACCEPT, "mcp-protocol-version": soak.PROTOCOL}
SHOWN = ("path", "rollouts", "lost", "makespan_s", "p99_s", "makespan_vs_gym", "p99_vs_gym", "upstream_peak", "queued", "cpu_ms", "fds", "load")  # fmt: skip


def durations(count: int, low: float, high: float, alpha: float, seed: int) -> list[float]:
    """``count`` seconds from a Pareto of shape ``alpha`` truncated to [low, high] (inverse CDF), seeded."""
    u = np.random.default_rng(seed).random(count)
    return [float(x) for x in low * (1 - u * (1 - (low / high) ** alpha)) ** (-1 / alpha)]


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return orjson.loads(answer.read())


async def rollout(targets: list[soak.Target], gym: bool, seconds: float, rng: random.Random) -> None:
    """Seed, one ``slow_step``, verify, each on a new connection; ``soak.Failed`` unless reward 1.0."""
    seeded, budget, arguments = rng.choice(targets), 600.0, orjson.dumps({"seconds": seconds})
    raw, cookies, _ = await soak.exchange(seeded, "/seed_session", orjson.dumps(ROW), {}, "seed", budget)
    if gym:
        headers = {"cookie": "; ".join(c.decode().split(";", 1)[0] for c in cookies)}
        await soak.exchange(seeded, "/slow_step", arguments, headers, "call", budget)
    else:
        headers = {client.TOKEN_HEADER: orjson.loads(raw)["mcp"]["headers"][client.TOKEN_HEADER]}
        call = client.tools_call("slow_step", {"seconds": seconds})
        raw, _, _ = await soak.exchange(rng.choice(targets), "/mcp", call, {**headers, **MCP}, "call", budget)
        if orjson.loads(raw).get("result", {}).get("isError", True):
            raise soak.Failed("error", "tools/call failed", raw[:300].decode(errors="replace"))
    raw, _, _ = await soak.exchange(seeded if gym else rng.choice(targets), "/verify", VERIFY, headers, "verify", budget)  # fmt: skip
    if (reward := orjson.loads(raw).get("reward")) != 1.0:
        raise soak.Failed("wrong", f"verify reward {reward}")


async def step(path: str, targets: list[soak.Target], upstream: Proc, bridges: list[Proc], seconds: list[float]) -> dict[str, Any]:  # fmt: skip
    """Every rollout released at once; the step's figures (module docstring)."""
    rng, latencies, reasons = random.Random(len(seconds)), list[float](), dict[str, int]()
    waited = lambda: sum(sum(p["waited"] for p in _json(f"{b.url}/healthz")["connections"].values() if "waited" in p) for b in bridges)  # noqa: E731  # fmt: skip
    fds = [[soak.fds(b.pid)] * 2 for b in bridges]
    _json(f"{upstream.url}/in_flight?reset=1")
    waited0, cpu0, t0 = waited(), sum(b.cpu() for b in bridges), time.monotonic()

    async def one(s: float) -> None:
        began = time.monotonic()
        try:
            await rollout(targets, path == "gym", s, rng)
            latencies.append(time.monotonic() - began)
        except (soak.Failed, OSError, ValueError, KeyError) as exc:
            reason = exc.reason if isinstance(exc, soak.Failed) else type(exc).__name__
            reasons[reason] = reasons.get(reason, 0) + 1

    tasks = [asyncio.ensure_future(one(s)) for s in seconds]
    while not all(t.done() for t in tasks):
        fds = [[f[0], max(f[1], soak.fds(b.pid))] for f, b in zip(fds, bridges, strict=True)]
        await asyncio.wait(tasks, timeout=0.5)
    makespan, cpu_s = time.monotonic() - t0, sum(b.cpu() for b in bridges) - cpu0
    peak, queued = _json(f"{upstream.url}/in_flight")["peak"], waited() - waited0
    await asyncio.sleep(6)  # past the idle connections' expiry (4 s against an external upstream)
    p50, p99 = np.percentile(latencies or [0.0], [50, 99])
    return {
        "path": path, "rollouts": len(seconds), "lost": len(seconds) - len(latencies), "reasons": reasons,
        "makespan_s": round(makespan, 2), "p50_s": round(float(p50), 2), "p99_s": round(float(p99), 2),
        "max_call_s": round(max(seconds), 2), "upstream_peak": peak, "queued": queued if bridges else None,
        "cpu_ms": round(cpu_s * 1000 / len(seconds), 3) if bridges else None,
        "fds": "/".join(f"{f[0]}-{f[1]}-{soak.fds(b.pid)}" for f, b in zip(fds, bridges, strict=True)),
        "load": round(os.getloadavg()[0], 1),
    }  # fmt: skip


async def run(args: argparse.Namespace, upstream: Proc, bridges: list[Proc]) -> dict[str, Any]:
    gym, both, one = [soak.target(upstream)], [soak.target(b) for b in bridges], [soak.target(bridges[0])]
    steps, cpu = [], []
    for count in args.rollouts:
        drawn = durations(int(count), args.min_s, args.max_s, args.alpha, args.seed)
        for path, targets, measured in (("gym", gym, []), ("x2", both, bridges), ("x1", one, bridges[:1])):
            steps.append(await step(path, targets, upstream, measured, drawn))
            print(steps[-1], flush=True)
    for s in args.cpu_durations:
        cpu.append(await step(f"x1, {s:g} s calls", one, upstream, bridges[:1], [s] * args.cpu_rollouts))
    for s in steps:  # Gym alone's figure ÷ the path's, in the same step size
        base = next(g for g in steps if g["path"] == "gym" and g["rollouts"] == s["rollouts"])
        s["makespan_vs_gym"], s["p99_vs_gym"] = (round(base[k] / s[k], 3) if s[k] else None for k in ("makespan_s", "p99_s"))  # fmt: skip
    return {"steps": steps, "cpu_by_duration": cpu}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog='make bench ARGS="long-tools"', description=__doc__)
    floats = lambda v: [float(x) for x in v.split(",") if x]  # noqa: E731
    for flag, kind, default in (("--rollouts", floats, [1024]), ("--min-s", float, 1.0), ("--max-s", float, 120.0), ("--alpha", float, 1.0), ("--seed", int, 7), ("--cpu-durations", floats, [1.0, 30.0]), ("--cpu-rollouts", int, 512)):  # fmt: skip
        p.add_argument(flag, type=kind, default=default)
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "long-tools.json")
    args = p.parse_args(argv)  # fmt: skip
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the client holds every socket
    out: dict[str, Any] = {**report.header("long-tools", argv), "bridge_settings": soak.settings_given()}
    started: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="gym-mcp-long-") as tmp:
        try:
            started.append(upstream := procs.start_upstream(Path(tmp), server=SERVER))
            started += [procs.start_bridge(Path(tmp), upstream.url, f"bridge-{i}", command=soak.LIMITED_BRIDGE) for i in range(2)]  # fmt: skip
            out["bridge_nofile_soft"] = resource.prlimit(started[1].pid, resource.RLIMIT_NOFILE)[0]
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                out.update(runner.run(run(args, upstream, started[1:])))
        except BenchError as exc:
            print(f"benchmarks.long_tools: {exc}")
            return 1
        finally:
            for proc in reversed(started):
                proc.stop()
    out["loadavg_at_end"], out["exact"] = os.getloadavg(), all(s["lost"] == 0 for s in out["steps"] + out["cpu_by_duration"])  # fmt: skip
    for rows in (out["steps"], out["cpu_by_duration"]):
        print(tabulate([{k: s.get(k) for k in SHOWN} for s in rows], headers="keys", tablefmt="github"))
    print(report.title(out), f"every reward exact: {out['exact']}", sep="\n")
    report.save(out, args.json)
    return 0 if out["exact"] else 1
