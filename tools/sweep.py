"""Compatibility sweep: every bundled Gym environment behind the bridge, scored natively and bridged.

``python -m tools.sweep [ENV ...] [--out docs/compatibility.md] [--json FILE]`` (``make sweep``).
For each environment of the Gym environment's ``resources_servers`` that ships
``data/example.jsonl`` (or the ones named):

1. ``gym-mcp-bridge serve --resources-server <env>`` starts it in managed mode, as a user would
   (its own environment built from its ``requirements.txt`` on first use, its directory as working
   directory, its config resolved); a start that fails is reported in a user's words (needs a
   model, needs network, needs an API key, ...), from the bridge's own one-line error;
2. the tools the bridge found are counted (``tools/list`` without a token: the upstream's set);
3. each shipped rollout (``data/example_rollouts.jsonl``; its row joined from ``example.jsonl``,
   ``cases_of``) is replayed natively — seed, the recorded calls, verify, straight against the upstream over Gym's HTTP (its own ``/mcp`` for an
   MCP-native server) — and bridged — seed through the bridge, the calls over MCP with the official
   SDK client, verify through the bridge — against the same upstream; parity is k of the n
   rollouts that scored natively whose bridged reward equals the native one. A Gymnasium server
   (``/reset`` + ``/step``, no ``/verify``) is replayed the way Gym's ``gymnasium_agent`` drives it.

The table goes to ``--out`` (Markdown) with the date, machine and command; what each environment's
result holds and how it reads (the reasons in a user's words, the table) is ``tools/sweep_report.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from benchmarks.procs import free_port
from bridge.commands import replay
from tools import gym_env
from tools.sweep_report import (
    EnvResult,
    markdown,
    parity_text,
    run_facts,
    short,
    user_reason,
    verify_reason,
)

ROOT = Path(__file__).resolve().parent.parent
GYM_PYTHON = ROOT / ".gym-env" / "bin" / "python"
SECRET = "sweep-secret-0123456789abcdef0123456789"
MAX_ROLLOUTS = 10
ROLLOUT_TIMEOUT_S = 90.0


def gym_root() -> Path:
    found = next((ROOT / ".gym-env" / "lib").glob("python3.*/site-packages/resources_servers"), None)
    if found is None:
        raise SystemExit("the Gym environment is missing: run 'make setup'")
    return found


def bundled_envs() -> list[str]:
    return sorted(d.name for d in gym_root().iterdir() if (d / "data" / "example.jsonl").is_file())


def start_bridge(
    env: str, log_path: Path, budget_s: float
) -> tuple[subprocess.Popen[bytes] | None, str, int]:
    """(process, "" or why not, port); the bridge is ready when the process is returned with ""."""
    port = free_port()
    argv = [sys.executable, "-m", "bridge", "serve", "--port", str(port), "--resources-server", env]
    argv += ["--startup-timeout-s", str(min(budget_s, 240)), "--no-restart-upstream"]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "GYM_MCP_BRIDGE_SECRET": SECRET},
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, user_reason(log_path.read_text(errors="replace")), port
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc, "", port
        time.sleep(0.3)
    stop(proc)
    return None, f"not ready within {budget_s:g}s: {user_reason(log_path.read_text(errors='replace'))}", port


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def cases_of(env: str) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], str]:
    """(row, response) pairs to replay, and where they come from when not the shipped rollouts' rows.

    A shipped rollout is joined with its row from ``example.jsonl`` (``replay.join_row``). When
    none joins (the rollouts were collected from rows the wheel does not ship) and the rows carry
    ``ground_truth`` actions, those actions are replayed instead; otherwise an unjoined rollout is
    replayed with the record's own fields, which Gym's collection copies from the row."""
    data = gym_root() / env / "data"
    path = data / "example_rollouts.jsonl"
    if not path.is_file():
        return [], ""
    try:
        rows = replay.load_jsonl(data / "example.jsonl")
        records = [r for r in replay.load_jsonl(path)[:MAX_ROLLOUTS] if isinstance(r.get("response"), dict)]
    except ValueError as exc:  # e.g. a file of "<PLACEHOLDER ROW>" lines
        return [], f"the shipped data is not JSON Lines ({short(str(exc), 80)})"
    joined = [(replay.join_row(record, rows)[0], record) for record in records]
    unjoined = sum(row is None for row, _ in joined)
    if records and unjoined == len(records) and all(isinstance(r.get("ground_truth"), list) for r in rows):
        source = "the rows' ground-truth actions: the shipped rollouts are for rows not in example.jsonl"
        return [(row, replay.ground_truth_response(row, False)) for row in rows[:MAX_ROLLOUTS]], source
    cases = []
    for row, record in joined:
        cases.append((row or replay.join_row(record, None)[0] or {}, record["response"]))
    source = (
        f"{unjoined} of {len(records)} shipped rollouts are for rows not in example.jsonl" if unjoined else ""
    )
    return cases, source


async def tool_names(url: str) -> list[str]:
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            f"{url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"},
        )
        return [tool["name"] for tool in answer.json().get("result", {}).get("tools", [])]


def model_turns(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A Gymnasium rollout's response cut into the model's turns, each a response of its own.

    ``gymnasium_agent`` appends each model answer's items, then the step's tool outputs and next
    observation (a user message); a turn is a run of model items between those."""
    turns: list[list[Any]] = [[]]
    for item in response.get("output", []):
        by_model = (
            isinstance(item, dict)
            and (
                item.get("type") in ("function_call", "reasoning")
                or item.get("role", "assistant") == "assistant"
            )
            and item.get("type") != "function_call_output"
        )
        if by_model:
            turns[-1].append(item)
        elif turns[-1]:
            turns.append([])
    return [response | {"output": items} for items in turns if items]


async def gymnasium_native(upstream_url: str, row: dict[str, Any], response: dict[str, Any]) -> float:
    """Gym's ``gymnasium_agent`` loop with the recorded turns: ``/reset``, then ``/step`` per turn."""
    async with httpx.AsyncClient(base_url=upstream_url, timeout=ROLLOUT_TIMEOUT_S) as http:
        (await http.post("/reset", json=row)).raise_for_status()
        total = 0.0
        for action in model_turns(response):
            answer = await http.post("/step", json=row | {"response": action})
            answer.raise_for_status()
            step = answer.json()
            total += float(step["reward"])
            if step["terminated"] or step["truncated"]:
                break
        return total


async def gymnasium_bridged(url: str, row: dict[str, Any], response: dict[str, Any]) -> float:
    """The same loop through the bridge: a seeded session, ``reset`` and ``step`` as MCP tools."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=ROLLOUT_TIMEOUT_S) as http,
        replay.seeded_client(http, row, ROLLOUT_TIMEOUT_S) as (_, client),
    ):
        steps = [("reset", row)] + [("step", row | {"response": a}) for a in model_turns(response)]
        total = 0.0
        for name, arguments in steps:
            result = await client.call_tool(name, arguments)
            text = replay.result_text(result)
            if result.is_error:
                raise RuntimeError(f"{name}: {text[:300]}")
            if name == "step":
                step = json.loads(text)
                total += float(step["reward"])
                if step["terminated"] or step["truncated"]:
                    break
        return total


async def score(url: str, env: str, result: EnvResult) -> None:
    health = httpx.get(f"{url}/healthz", timeout=10).json()
    upstream_url = health["upstream"]["url"]
    names = await tool_names(url)
    result.tools = len(names)
    cases, result.source = cases_of(env)
    result.rollouts = len(cases)
    # A Gymnasium server (Gym's ``GymnasiumServer``) scores by ``/step``, not ``/verify``.
    gymnasium = {"reset", "step"} <= set(names)
    native_errors: list[str] = []
    scored: list[tuple[int, float]] = []
    for index, (row, response) in enumerate(cases):
        try:
            if gymnasium:
                first = await asyncio.wait_for(
                    gymnasium_native(upstream_url, row, response), ROLLOUT_TIMEOUT_S
                )
                second = await asyncio.wait_for(
                    gymnasium_native(upstream_url, row, response), ROLLOUT_TIMEOUT_S
                )
                if first != second:
                    native_errors.append(f"not reproducible: the same actions scored {first}, then {second}")
                    continue
                native: float | None = first
            else:
                native = await asyncio.wait_for(
                    replay.replay_native(upstream_url, row, response), ROLLOUT_TIMEOUT_S
                )
        except Exception as exc:
            native_errors.append(_native_error(exc))
            continue
        if native is None:
            native_errors.append("verify returned no reward")
            continue
        scored.append((index, native))
    if gymnasium and native_errors and any(e.startswith("not reproducible") for e in native_errors):
        scored = []  # one unreproducible rollout makes any agreement on the others chance
    for index, native in scored:
        row, response = cases[index]
        result.native_scored += 1
        try:
            if gymnasium:
                bridged: float | None = await asyncio.wait_for(
                    gymnasium_bridged(url, row, response), ROLLOUT_TIMEOUT_S
                )
            else:
                async with httpx.AsyncClient(base_url=url, timeout=ROLLOUT_TIMEOUT_S) as http:
                    verdict, _, _ = await asyncio.wait_for(
                        replay.replay_over_mcp(http, row, response, "claude-code", None), ROLLOUT_TIMEOUT_S
                    )
                bridged = replay._reward(verdict)
        except Exception as exc:
            result.mismatches.append(
                {"rollout": index, "native": native, "bridge": None, "error": short(str(exc))}
            )
            continue
        if bridged is not None and abs(bridged - native) <= 1e-9:
            result.parity += 1
        else:
            result.mismatches.append({"rollout": index, "native": native, "bridge": bridged})
    if native_errors:
        result.native_error = native_errors[0][:1000]
        result.note = verify_reason(native_errors[0], result.source)


def _native_error(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}: {exc.response.text[:300]}"
    if isinstance(exc, TimeoutError):
        return f"no answer within {ROLLOUT_TIMEOUT_S:g}s"
    return f"{type(exc).__name__}: {exc}"


def sweep_one(env: str, log_dir: Path, budget_s: float) -> EnvResult:
    result = EnvResult(env)
    started = time.monotonic()
    proc, why, port = start_bridge(env, log_dir / f"{env}.log", budget_s)
    result.start_s = round(time.monotonic() - started, 1)
    if proc is None:
        result.why = why
        return result
    result.started = True
    try:
        asyncio.run(score(f"http://127.0.0.1:{port}", env, result))
    except Exception as exc:
        result.note = f"sweep error: {short(f'{type(exc).__name__}: {exc}')}"
    finally:
        stop(proc)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("envs", nargs="*", help="environments to sweep (default: every bundled one)")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (e.g. docs/compatibility.md)")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--budget-s", type=float, default=600.0, help="per environment: build + start budget")
    parser.add_argument("--log-dir", type=Path, default=ROOT / ".cache" / "sweep-logs")
    parser.add_argument("--render", type=Path, help="only re-render --out from a --json file of a past run")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        results = [EnvResult(**r) for r in saved["results"]]
        for r in results:
            if r.native_error:
                r.note = verify_reason(r.native_error, r.source)
        if args.out:
            args.out.write_text(markdown(results, saved))
        return 0
    args.log_dir.mkdir(parents=True, exist_ok=True)
    envs = args.envs or bundled_envs()
    began = time.monotonic()
    command = "make sweep" if not args.envs else f"python -m tools.sweep {' '.join(args.envs)}"
    gym_version = gym_env.gym_version(GYM_PYTHON)
    results = []
    for number, env in enumerate(envs, 1):
        result = sweep_one(env, args.log_dir, args.budget_s)
        results.append(result)
        state = "started" if result.started else f"not started: {result.why}"
        print(
            f"[{number}/{len(envs)}] {env}: {state}; tools {result.tools}; parity {parity_text(result)}",
            flush=True,
        )
        if args.json:
            saved = {
                **run_facts(command, time.monotonic() - began, gym_version),
                "results": [asdict(r) for r in results],
            }
            args.json.write_text(json.dumps(saved, indent=2))
    if args.out:
        args.out.write_text(markdown(results, run_facts(command, time.monotonic() - began, gym_version)))
    broken = [r for r in results if r.started and r.native_scored and r.parity != r.native_scored]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
