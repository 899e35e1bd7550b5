"""Gym's own collector at scale through the bridge, every reward compared with Gym's own answer.

    make bench ARGS="collector [--repeats 334] [--parallel N] [--json FILE]"

Gym's launcher (``gym env start``, nemo-gym 0.7.0, from the project root, as
``tests/test_gym_launcher.py`` runs it) starts ``examples/gym/simple_agent.yaml`` (the bridge, managed,
in front of ``example_session_state_mgmt``) and, in the same launch, the reference: Gym 0.7's
in-process MCP exposure of the same environment. The model is the launcher tests' scripted one: for
each shipped row its solution (reward 1.0), and a control one call short (0.0).
``ng_collect_rollouts +num_repeats=K`` runs over those rows through the bridge, then through the
reference, with the collector's defaults (every rollout dispatched at once) unless ``--parallel``;
nothing calls ``/close_session``. Each bridged reward is compared with the reference rollout of the
same (row, repeat); the bridge's RSS and ``/metrics`` are read before and after. A mismatch, a
missing rollout or a rejection makes the exit status 1; no time is asserted.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks import procs
from benchmarks import report as report_mod
from benchmarks.procs import BenchError, free_port, memory_kb
from tests.fixtures.helpers import LISTEN, children_of, tcp_connections
from tests.interop.gym_launcher import (
    Case,
    Launcher,
    counter_cases,
    in_process_exposure,
    policy,
    shipped_rows,
)
from tests.interop.stubs.gym_model_stub import StubPolicyEndpoint
from tools import gym_env

ENV = "example_session_state_mgmt"
AGENT = "simple_agent"
BRIDGE = "gym_mcp_bridge"  # the bridge's instance (and server folder) name in the example config
IN_PROCESS = "gym_in_process"
EXAMPLE = procs.ROOT / "examples" / "gym" / "simple_agent.yaml"
# the collector's progress line: "Finished N / M rollouts (P%) in H:MM:SS (...)"
FINISHED = re.compile(r"Finished (\d+) / \d+ rollouts \(\d+%\) in (\d+):(\d+):(\d+)")
PREFIX = "gym_mcp_bridge_"
TOTALS = (
    "sessions_active",
    "sessions_finished",
    "sessions_created_total",
    "tool_calls_total",
    "retries_total",
    "state_bytes",
)
LABELLED = ("sessions_ended_total", "rejections_total", "verify_total")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="make bench ARGS='collector'", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=334, help="num_repeats: rollouts per row (6 rows)")
    p.add_argument(
        "--parallel", type=int, default=None, help="num_samples_in_parallel (default: Gym's, unset)"
    )
    p.add_argument("--no-reference", action="store_true", help="skip the in-process collection")
    p.add_argument("--timeout", type=float, default=5400, help="seconds per collection")
    p.add_argument(
        "--work", type=Path, default=None, help="keep logs and rollouts here (default: a temp dir)"
    )
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "collector.json")
    return p.parse_args(argv)


def listener_pid(root: int, port: int, timeout_s: float = 30) -> int:
    """The process under ``root`` listening on ``port`` (the bridge: the entry execs into it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in children_of(root):
            try:
                if any(local == port and state == LISTEN for local, _, state in tcp_connections(pid)):
                    return pid
            except OSError:  # gone, or not ours to read
                continue
        time.sleep(0.5)
    raise BenchError(f"no process under {root} listens on {port}")


def bridge_metrics(url: str) -> dict[str, Any]:
    """What the report shows of the bridge's ``/metrics``: session gauges, rejections, calls, verifies."""
    series = report_mod.scrape(url)["series"]
    out: dict[str, Any] = {}
    for name in (*TOTALS, *LABELLED):
        found = report_mod.by_labels(series, PREFIX + name)
        out[name.removesuffix("_total")] = sum(found.values()) if name in TOTALS else found
    return out


@dataclass
class Collection:
    rollouts: dict[tuple[int, int], dict[str, Any]]  # by (row index, repeat index)
    wall_s: float  # the ng_collect_rollouts command, start to exit
    phase_s: float | None  # its rollouts alone: its own last "Finished N / N rollouts ... in H:MM:SS"

    def summary(self) -> dict[str, Any]:
        return {
            "collected": len(self.rollouts),
            "wall_s": self.wall_s,
            "rollouts_per_s": len(self.rollouts) / self.wall_s,
            "collecting_s": self.phase_s,
            "collecting_rollouts_per_s": len(self.rollouts) / self.phase_s if self.phase_s else None,
        }


def collect(launcher: Launcher, agent: str, cases: list[Case], args: argparse.Namespace) -> Collection:
    """One ``ng_collect_rollouts`` over the cases' rows for ``agent``, ``--repeats`` times each."""
    keys = [f"+num_repeats={args.repeats}"]
    if args.parallel:
        keys.append(f"+num_samples_in_parallel={args.parallel}")
    rows = [{**case.row, "agent_ref": {"name": agent}} for case in cases]
    started = time.monotonic()
    rollouts = launcher.collector(rows, agent, keys, timeout_s=args.timeout)
    wall = time.monotonic() - started
    progress = FINISHED.findall((launcher.work / f"{agent}-collect.log").read_text(errors="replace"))
    phase = None
    if progress and int(progress[-1][0]) == len(rollouts):
        hours, minutes, seconds = (int(part) for part in progress[-1][1:])
        phase = float(hours * 3600 + minutes * 60 + seconds)
    by_key = {(int(r["_ng_task_index"]), int(r["_ng_rollout_index"])): r for r in rollouts}
    return Collection(by_key, wall, phase)


def reward(rollout: dict[str, Any] | None) -> float | None:
    return None if rollout is None else float(rollout["reward"])


def compare(
    bridged: Collection, reference: Collection | None, plan: list[float], repeats: int
) -> dict[str, Any]:
    """Every bridged reward against the reference rollout of the same (row, repeat), and the
    reference against ``plan`` (each row's planned reward): a missing or different reward is a
    mismatch."""
    got = {key: reward(r) for key, r in bridged.rollouts.items()}
    expected = {key: reward(r) for key, r in reference.rollouts.items()} if reference else {}
    keys = [(task, repeat) for task in range(len(plan)) for repeat in range(repeats)]
    mismatches = [
        {"row": t, "repeat": r, "bridge": got.get((t, r)), "reference": expected.get((t, r))}
        for t, r in keys
        if got.get((t, r)) is None or (reference and got.get((t, r)) != expected.get((t, r)))
    ]
    calls = [r.get("_bridge", {}).get("recorded_tool_calls") for r in bridged.rollouts.values()]
    return {
        "bridged": {
            **bridged.summary(),
            "rewards": {str(v): sum(1 for g in got.values() if g == v) for v in (0.0, 1.0)},
            "recorded_tool_calls_not_2": sum(1 for c in calls if c != 2),
        },
        "reference": None
        if reference is None
        else {**reference.summary(), "off_plan": sum(1 for k in keys if expected.get(k) != plan[k[0]])},
        "compared": len(keys) if reference else 0,
        "mismatches": len(mismatches),
        "mismatch_rows": mismatches[:50],
    }


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    if reason := gym_env.ensure_gym07_env(work / "gym07-build.log"):
        raise BenchError(reason)
    gym_python = gym_env.GYM07_ENV / "bin" / "python"
    cases = counter_cases(rows := shipped_rows(gym_python, ENV), indices=range(len(rows)))
    reference = work / "reference.yaml"
    reference.write_text(
        yaml.safe_dump(in_process_exposure(ENV, IN_PROCESS, {AGENT: EXAMPLE}), sort_keys=False)
    )
    port = free_port("127.0.0.1")
    url, say = f"http://127.0.0.1:{port}", functools.partial(print, file=sys.stderr)
    launcher = Launcher(gym_python, "gym env start", work)
    bridge_keys = [
        f"++{BRIDGE}.resources_servers.{BRIDGE}.{key}" for key in ("host=127.0.0.1", f"port={port}")
    ]
    result: dict[str, Any] = {
        "rows": len(cases),
        "repeats": args.repeats,
        "rollouts": len(cases) * args.repeats,
    }
    with StubPolicyEndpoint() as stub:
        try:
            launcher.start(
                [str(EXAMPLE.relative_to(procs.ROOT)), str(reference)],
                policy(stub, cases) + bridge_keys,
                "0.7.0",
            )
            assert launcher.proc is not None
            say(f"gym env start: all servers ready after {launcher.ready_s:.0f}s")
            pid = listener_pid(launcher.proc.pid, port)
            before = {"memory_kb": memory_kb(pid), "metrics": bridge_metrics(url)}
            say(f"collecting {result['rollouts']} rollouts through the bridge ...")
            bridged = collect(launcher, AGENT, cases, args)
            after = {"memory_kb": memory_kb(pid), "metrics": bridge_metrics(url)}
            say(
                f"  {len(bridged.rollouts)} rollouts in {bridged.wall_s:.0f}s; then through Gym's in-process MCP"
            )
            in_process = None if args.no_reference else collect(launcher, f"{AGENT}_in_process", cases, args)
            unknown, model_calls = list(stub.unknown), len(stub.requests)
        finally:
            launcher.stop()
    parallel = re.search(
        r"Querying with (\d+) concurrent requests",
        (work / f"{AGENT}-collect.log").read_text(errors="replace"),
    )
    plan = [0.0 if case.kind == "control" else 1.0 for case in cases]
    return {
        **result,
        "collector_parallelism": int(parallel[1])
        if parallel
        else "unbounded (num_samples_in_parallel unset)",
        "ready_s": launcher.ready_s,
        **compare(bridged, in_process, plan, args.repeats),
        "bridge_before": before,
        "bridge_after": after,
        "model_calls": model_calls,
        "model_requests_unmatched": len(unknown),
    }


def rates(run: dict[str, Any]) -> str:
    text = f"{run['collected']} rollouts, command {run['wall_s']:.1f}s = {run['rollouts_per_s']:.1f}/s"
    alone = f"; collecting alone {run['collecting_s']:.0f}s = {run['collecting_rollouts_per_s']:.1f}/s"
    return text + alone if run["collecting_s"] else text


def report(result: dict[str, Any]) -> str:
    b, ref, before, after = (
        result["bridged"],
        result["reference"],
        result["bridge_before"],
        result["bridge_after"],
    )
    return "\n".join(
        [
            report_mod.title(result),
            f"rows {result['rows']} x num_repeats {result['repeats']} = {result['rollouts']} rollouts; collector "
            f"parallelism: {result['collector_parallelism']}; launcher ready after {result['ready_s']:.0f}s",
            f"through the bridge: {rates(b)}; rewards {b['rewards']}; recorded tool calls != 2: "
            f"{b['recorded_tool_calls_not_2']}",
            *(
                [f"through Gym's in-process MCP: {rates(ref)}; off the plan: {ref['off_plan']}"]
                if ref
                else []
            ),
            f"rewards compared row by row: {result['compared']}, mismatches: {result['mismatches']}",
            *(f"  mismatch: {m}" for m in result["mismatch_rows"]),
            f"bridge RSS: {before['memory_kb']['rss_kb'] / 1024:.1f} MB before, {after['memory_kb']['rss_kb'] / 1024:.1f}"
            f" MB after (peak {after['memory_kb']['hwm_kb'] / 1024:.1f} MB)",
            f"bridge /metrics before: {json.dumps(before['metrics'])}\nbridge /metrics after:  {json.dumps(after['metrics'])}",
            f"model calls: {result['model_calls']}, unmatched: {result['model_requests_unmatched']}",
        ]
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    head = report_mod.header("collector", argv)
    try:
        if args.work is not None:
            args.work.mkdir(parents=True, exist_ok=True)
            result = run(args, args.work.resolve())
        else:
            with tempfile.TemporaryDirectory(prefix="gym-mcp-collector-") as tmp:
                result = run(args, Path(tmp))
    except (BenchError, AssertionError) as exc:
        print(f"benchmarks.collector: {exc}", file=sys.stderr)
        return 1
    result = {**head, "loadavg_at_end": os.getloadavg(), **result}
    print(report(result))
    report_mod.save(result, args.json)
    rejected = any(result["bridge_after"]["metrics"]["rejections"].values())
    return (
        0
        if result["mismatches"] == 0 and result["bridged"]["collected"] == result["rollouts"] and not rejected
        else 1
    )
