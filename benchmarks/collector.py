"""Gym's own collector at scale through the bridge, every reward compared with Gym's own answer.

    python -m benchmarks.collector [--repeats 334] [--parallel N] [--json FILE]
    make bench ARGS="collector --repeats 334"

Gym's launcher (``gym env start``, nemo-gym 0.7.0, run from the project root as
``tests/test_gym_launcher.py`` runs it, with ``tests/interop/gym_launcher.py``) starts
``examples/gym/simple_agent.yaml`` (the bridge, managed, in front of ``example_session_state_mgmt``;
Gym's ``openai_model``; ``simple_agent`` and its ``legacy_agent`` relay) and, in the same launch,
the reference: Gym 0.7's in-process MCP exposure of the same environment with
``simple_agent_in_process`` in front of it. The model is the scripted one of the launcher tests
(``StubPolicyEndpoint`` behind Gym's ``openai_model``): for each shipped row of the environment its
solution (reward 1.0), and a control, row 0 under another prompt, one short (0.0).

``ng_collect_rollouts +num_repeats=K`` then runs over those rows twice: through the bridge, then
through the reference, each with the collector's defaults unless ``--parallel`` is given (no
``num_samples_in_parallel``: every rollout is dispatched at once, bounded only by Gym's HTTP client).
As in training, nothing calls ``/close_session``. Every bridged rollout's reward is compared with the
reference rollout of the same (row, repeat); the bridge's RSS and its ``/metrics`` are read before
and after the bridged collection.

Figures print and go to JSON (``benchmarks/results/collector.json``). Nothing is asserted about
time; a mismatch, a missing rollout or a rejection makes the exit status 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
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

import httpx
import yaml

from benchmarks import procs
from benchmarks.procs import BenchError, free_port, memory_kb
from benchmarks.report import machine
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

ENV = "example_session_state_mgmt"
AGENT = "simple_agent"
BRIDGE = "gym_mcp_bridge"  # the bridge's instance (and server folder) name in the example config
IN_PROCESS = "gym_in_process"
EXAMPLE = procs.ROOT / "examples" / "gym" / "simple_agent.yaml"
# the collector's progress line: "Finished N / M rollouts (P%) in H:MM:SS (...)"
FINISHED = re.compile(r"Finished (\d+) / \d+ rollouts \(\d+%\) in (\d+):(\d+):(\d+)")
SAMPLE = re.compile(r"(gym_mcp_bridge_[a-zA-Z_:]+)(\{.*\})? (\S+)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.collector", description=__doc__.split("\n\n")[0])
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


def bridge_metrics(url: str) -> dict[str, float]:
    """The bridge's own ``/metrics`` samples (``name{labels}`` -> value), histograms left out."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    samples: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.fullmatch(line)
        if match and not match[1].endswith(("_bucket", "_count", "_sum", "_created")):
            samples[match[1].removesuffix("_total") + (match[2] or "")] = float(match[3])
    return samples


def by_name(samples: dict[str, float], name: str) -> dict[str, float]:
    """The series of one metric, by their label string ('' for none)."""
    prefix = f"gym_mcp_bridge_{name}"
    return {
        key[len(prefix) :]: value
        for key, value in samples.items()
        if key == prefix or key.startswith(prefix + "{")
    }


def summary(samples: dict[str, float]) -> dict[str, Any]:
    """What the report shows of ``/metrics``: session gauges, rejections, calls, verifies."""
    total = lambda name: sum(by_name(samples, name).values())  # noqa: E731
    return {
        "sessions_active": total("sessions_active"),
        "sessions_finished": total("sessions_finished"),
        "sessions_created": total("sessions_created"),
        "sessions_ended": by_name(samples, "sessions_ended"),
        "rejections": by_name(samples, "rejections"),
        "tool_calls": total("tool_calls"),
        "verify": by_name(samples, "verify"),
        "retries": total("retries"),
        "state_bytes": total("state_bytes"),
    }


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


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    reason = procs.ensure_gym07_env(work / "gym07-build.log")
    if reason is not None:
        raise BenchError(reason)
    gym_python = procs.GYM07_ENV / "bin" / "python"
    rows = shipped_rows(gym_python, ENV)
    cases = counter_cases(rows, indices=range(len(rows)))
    reference = work / "reference.yaml"
    reference.write_text(
        yaml.safe_dump(in_process_exposure(ENV, IN_PROCESS, {AGENT: EXAMPLE}), sort_keys=False)
    )
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
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
            print(f"gym env start: all servers ready after {launcher.ready_s:.0f}s", file=sys.stderr)
            pid = listener_pid(launcher.proc.pid, port)
            before = {"memory_kb": memory_kb(pid), "metrics": summary(bridge_metrics(url))}
            print(f"collecting {result['rollouts']} rollouts through the bridge ...", file=sys.stderr)
            bridged = collect(launcher, AGENT, cases, args)
            after = {"memory_kb": memory_kb(pid), "metrics": summary(bridge_metrics(url))}
            print(f"  {len(bridged.rollouts)} rollouts in {bridged.wall_s:.0f}s", file=sys.stderr)
            reference_run = None
            if not args.no_reference:
                print(
                    f"collecting {result['rollouts']} rollouts through Gym's in-process MCP ...",
                    file=sys.stderr,
                )
                reference_run = collect(launcher, f"{AGENT}_in_process", cases, args)
                print(
                    f"  {len(reference_run.rollouts)} rollouts in {reference_run.wall_s:.0f}s",
                    file=sys.stderr,
                )
            unknown = list(stub.unknown)
            model_calls = len(stub.requests)
        finally:
            launcher.stop()
    log = (work / f"{AGENT}-collect.log").read_text(errors="replace")
    parallel = re.search(r"Querying with (\d+) concurrent requests", log)
    got = {key: reward(r) for key, r in bridged.rollouts.items()}
    expected = {key: reward(r) for key, r in reference_run.rollouts.items()} if reference_run else {}
    keys = [(task, repeat) for task in range(len(cases)) for repeat in range(args.repeats)]
    planned = {i: 0.0 if case.kind == "control" else 1.0 for i, case in enumerate(cases)}
    mismatches = [
        {"row": t, "repeat": r, "bridge": got.get((t, r)), "reference": expected.get((t, r))}
        for t, r in keys
        if got.get((t, r)) is None or (reference_run and got.get((t, r)) != expected.get((t, r)))
    ]
    calls = [r.get("_bridge", {}).get("recorded_tool_calls") for r in bridged.rollouts.values()]
    result.update(
        {
            "collector_parallelism": int(parallel[1])
            if parallel
            else "unbounded (num_samples_in_parallel unset)",
            "ready_s": launcher.ready_s,
            "bridged": {
                **bridged.summary(),
                "rewards": {str(v): sum(1 for g in got.values() if g == v) for v in (0.0, 1.0)},
                "recorded_tool_calls_not_2": sum(1 for c in calls if c != 2),
            },
            "reference": None
            if reference_run is None
            else {
                **reference_run.summary(),
                "off_plan": sum(1 for k in keys if expected.get(k) != planned[k[0]]),
            },
            "compared": len(keys) if reference_run else 0,
            "mismatches": len(mismatches),
            "mismatch_rows": mismatches[:50],
            "bridge_before": before,
            "bridge_after": after,
            "model_calls": model_calls,
            "model_requests_unmatched": len(unknown),
        }
    )
    return result


def rates(run: dict[str, Any]) -> str:
    text = (
        f"{run['collected']} rollouts, command {run['wall_s']:.1f}s = {run['rollouts_per_s']:.1f} rollouts/s"
    )
    if run["collecting_s"]:
        text += f"; collecting alone {run['collecting_s']:.0f}s = {run['collecting_rollouts_per_s']:.1f} rollouts/s"
    return text


def report(result: dict[str, Any]) -> str:
    b, ref = result["bridged"], result["reference"]
    before, after = result["bridge_before"], result["bridge_after"]
    mb = lambda side: side["memory_kb"]["rss_kb"] / 1024  # noqa: E731
    lines = [
        f"gym-mcp-bridge, Gym's own collector at scale: {result['when_utc'][:16]} UTC, {result['machine']['cpu']} "
        f"x{result['machine']['cores']}, load avg at start {result['machine']['loadavg_at_start'][0]:.2f}, "
        f"at end {result['loadavg_at_end'][0]:.2f}",
        f"rows {result['rows']} x num_repeats {result['repeats']} = {result['rollouts']} rollouts; "
        f"collector parallelism: {result['collector_parallelism']}; launcher ready after {result['ready_s']:.0f}s",
        f"through the bridge: {rates(b)}; rewards {b['rewards']}; "
        f"rollouts whose recorded tool calls != 2: {b['recorded_tool_calls_not_2']}",
    ]
    if ref is not None:
        lines.append(
            f"through Gym's in-process MCP (the reference): {rates(ref)}; off the plan: {ref['off_plan']}"
        )
    lines.append(f"rewards compared row by row: {result['compared']}, mismatches: {result['mismatches']}")
    lines += [f"  mismatch: {m}" for m in result["mismatch_rows"]]
    lines += [
        f"bridge RSS: {mb(before):.1f} MB before, {mb(after):.1f} MB after "
        f"(peak {after['memory_kb']['hwm_kb'] / 1024:.1f} MB)",
        f"bridge /metrics before: {json.dumps(before['metrics'])}",
        f"bridge /metrics after:  {json.dumps(after['metrics'])}",
        f"model calls answered by the scripted model: {result['model_calls']}, "
        f"unmatched: {result['model_requests_unmatched']}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    when = dt.datetime.now(dt.UTC)
    info = machine()
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
    result = {
        "when_utc": when.isoformat(),
        "command": "python -m benchmarks.collector " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": info,
        "loadavg_at_end": os.getloadavg(),
        **result,
    }
    print(report(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"json: {args.json}")
    after = result["bridge_after"]["metrics"]
    ok = (
        result["mismatches"] == 0
        and result["bridged"]["collected"] == result["rollouts"]
        and not any(after["rejections"].values())
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
