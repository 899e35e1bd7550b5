"""Rolling restarts: every replica restarted in turn while rollouts with model time run, against the
same run with no restart.

    make bench ARGS="rolling [--replicas 2,3] [--rollouts 256] [--rounds 10] [--model-s 1,3] [--grace-s 600]"

Replicas: ``gym-mcp-bridge serve``, managed mode, on loopback. Workers run rollouts: a seed through
the "Service" (a random replica not told to stop), three calls after model time each (MCP at the
session's URL, REST through the Service), ``/verify``: exact at reward 1.0. The restart run sends
SIGTERM to each replica in turn (out of the Service first, as a preStop does), waits for its exit
(the drain) and starts it again on its port. Figures: exact, lost by kind, drains, makespans.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks import procs, report
from benchmarks.client import MCP_ACCEPT, TOKEN_HEADER, connect, request, seed_body, tools_call

RESPONSE = {"id": "r", "object": "response", "created_at": 0, "model": "bench", "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip


class Fleet:
    """The replicas, and which of them the Service routes to."""

    def __init__(self, work: Path, count: int, grace_s: float) -> None:
        self.work, self.env = work, {"GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S": str(grace_s)}
        self.replicas = [self.start(i) for i in range(count)]
        self.routed = set(range(count))

    def start(self, i: int, port: int | None = None) -> procs.Proc:
        return procs.start_bridge(self.work, None, name=f"r{i}", env=self.env, port=port)

    def service(self) -> str:
        return self.replicas[random.choice(sorted(self.routed))].url

    async def restart(self, i: int) -> dict[str, float]:
        old, signalled = self.replicas[i], time.monotonic()
        self.routed.discard(i)
        old.popen.send_signal(signal.SIGTERM)
        while old.alive():
            await asyncio.sleep(0.05)
        drained = time.monotonic()
        self.replicas[i] = await asyncio.to_thread(self.start, i, int(old.url.rsplit(":", 1)[1]))
        self.routed.add(i)
        return {"drain_s": drained - signalled, "restart_to_ready_s": time.monotonic() - drained, "exit_code": float(old.popen.returncode)}  # fmt: skip


async def post(url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    """One request on a connection of its own: (status, JSON body); (0, reason) when unreachable."""
    try:
        conn = await connect(url)
        status, answer, _ = await conn.call(request(path, body, {"host": url[7:], **headers}))
        conn.transport.close()
    except (OSError, procs.BenchError) as exc:
        return 0, str(exc)
    try:
        return status, orjson.loads(answer)
    except orjson.JSONDecodeError:
        return status, answer.decode(errors="replace")


def kind_of(status: int, answer: Any) -> str:  # the refusal's failure_kind, else what failed
    named = answer.get("failure_kind") if isinstance(answer, dict) else None
    return str(named or ("transport_unreachable" if status == 0 else f"http_{status}"))


async def rollout(fleet: Fleet, rng: random.Random, initial: int, model_s: tuple[float, float]) -> str:
    """One rollout: ``exact``, ``wrong_reward`` or the kind of the refusal that lost it."""
    status, seeded = await post(fleet.service(), "/seed_session", seed_body(initial), {})
    for _ in range(50):  # a refused seed (a replica draining) is retried
        if status == 200:
            break
        await asyncio.sleep(0.2)
        status, seeded = await post(fleet.service(), "/seed_session", seed_body(initial), {})
    if status != 200:
        return f"seed_{kind_of(status, seeded)}"
    token = {TOKEN_HEADER: seeded["mcp"]["headers"][TOKEN_HEADER]}
    own = seeded["mcp"]["url"].removesuffix("/mcp")
    for step, count in enumerate((1, 2, 3)):
        await asyncio.sleep(rng.uniform(*model_s))
        if step % 2 == 0:  # MCP at the session's own URL
            call = tools_call("increment_counter", {"count": count})
            status, answer = await post(own, "/mcp", call, {**token, "accept": MCP_ACCEPT})
            result = answer.get("result", {}) if isinstance(answer, dict) else {}
            if status == 200 and result.get("isError"):
                return str((result.get("structuredContent") or {}).get("failure_kind") or "mcp_is_error")
        else:  # REST through the Service, forwarded to the owner
            status, answer = await post(fleet.service(), "/increment_counter", orjson.dumps({"count": count}), token)  # fmt: skip
        if status != 200:
            return kind_of(status, answer)
    body = {**orjson.loads(seed_body(initial)), "expected_count": initial + 6, "response": RESPONSE}
    status, answer = await post(fleet.service(), "/verify", orjson.dumps(body), token)
    if status != 200:
        return kind_of(status, answer)
    return "exact" if answer.get("reward") == 1.0 else "wrong_reward"


async def run(fleet: Fleet, args: argparse.Namespace, restart: bool) -> dict[str, Any]:
    outcomes: dict[str, int] = {}

    async def worker(w: int) -> None:
        rng = random.Random(w)
        for r in range(args.rounds):
            outcome = await rollout(fleet, rng, w * 1000 + r, args.model_s)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    started, ended = time.monotonic(), [0.0]
    workers = asyncio.gather(*(worker(w) for w in range(args.rollouts)))
    workers.add_done_callback(lambda _: ended.__setitem__(0, time.monotonic()))
    drains = []
    if restart:
        await asyncio.sleep(max(args.model_s))  # every rollout in progress
        drains = [await fleet.restart(i) for i in range(len(fleet.replicas))]
    await workers
    total, exact = args.rollouts * args.rounds, outcomes.get("exact", 0)
    return {"makespan_s": ended[0] - started, "rollouts": total, "outcomes": outcomes, "exact": exact, "lost": total - exact, "restarts": drains}  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='make bench ARGS="rolling"', description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="2,3")
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10, help="per worker: the run outlasts the restarts")
    parser.add_argument("--model-s", default="1,3", help="model time before each call: low,high seconds")
    parser.add_argument("--grace-s", type=float, default=600.0)
    parser.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "rolling.json")
    args = parser.parse_args(argv)
    args.model_s = tuple(float(x) for x in args.model_s.split(","))
    out: dict[str, Any] = {**report.header("rolling", argv), "settings": {**vars(args), "json": str(args.json)}, "runs": []}  # fmt: skip
    print(report.title(out))
    for count in (int(n) for n in args.replicas.split(",")):
        with tempfile.TemporaryDirectory() as work:
            fleet = Fleet(Path(work), count, args.grace_s)
            try:
                row: dict[str, Any] = {"replicas": count, "no_restart": asyncio.run(run(fleet, args, False))}
                row["restart"] = asyncio.run(run(fleet, args, True))
            finally:
                for proc in fleet.replicas:
                    proc.stop()
        out["runs"].append(row)
        base, rolled = row["no_restart"], row["restart"]
        drains = ", ".join(f"{d['drain_s']:.1f}s (ready {d['restart_to_ready_s']:.1f}s later)" for d in rolled["restarts"])  # fmt: skip
        print(f"{count} replicas: {rolled['exact']}/{rolled['rollouts']} exact, lost: "
              f"{ {k: v for k, v in rolled['outcomes'].items() if k != 'exact'} or 'none'}; drains: {drains}; makespan "
              f"{base['makespan_s']:.1f}s without restart, {rolled['makespan_s']:.1f}s with", flush=True)  # fmt: skip
    out["loadavg_at_end"] = list(os.getloadavg())
    report.save(out, args.json)
    return 1 if any(r[k]["lost"] for r in out["runs"] for k in ("no_restart", "restart")) else 0
