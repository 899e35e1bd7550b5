"""Gym's own rollout collection with the bridge as the resources server.

nemo-gym 0.4.0's ``simple_agent`` agent servers and Gym's ``HeadServer`` run in the Gym
environment (``tests/interop/gym_collect_servers.py``; the global config is built by Gym's own
parser). For each environment (``example_multi_step``, ``workplace_assistant``) there are two
agents, identical but for the host/port of their resources server in Gym's config: the bridge
(drop-in ``resources_url``), or the Gym server the bridge runs (native). The model server is a
stub speaking Gym's model-server contract (``tests/interop/stubs/gym_model_stub.py``) that replays
each row's solution from the shipped data: ``example_multi_step``'s recorded rollout calls (its
``example_rollouts.jsonl``, joined to the rows by prompt), ``workplace_assistant``'s
``ground_truth``; one row of each is also collected "perturbed" (the synonym values reversed; the
last ground-truth action dropped).

Gym's collection command ``ng_collect_rollouts`` (``gym eval run --no-serve``) then collects the
same rows twice, once through the bridge agents and once through the native ones, and the rewards
it writes must be equal, row by row (1.0 for the solutions, 0.0 for the perturbed runs), with the
bridged calls visible in the bridge's call log.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import (
    GYM_PYTHON,
    ROOT,
    BridgeProcess,
    free_port,
    gym_data,
    gym_servers,
    upstream_url,
)
from tests.fixtures.harness import Solution, ground_truth_solution
from tests.interop.gym_collect_env import ensure_collect_env
from tests.interop.stubs.gym_model_stub import PLAN_TAG, Plan, StubGymModelServer, first_user_text

pytestmark = pytest.mark.launcher

SERVERS = ROOT / "tests" / "interop" / "gym_collect_servers.py"
ENVS = ("example_multi_step", "workplace_assistant")
MAX_STEPS = {"workplace_assistant": 6}  # as in its shipped configs/workplace_assistant.yaml
ROWS = {"example_multi_step": (0, 1, 2), "workplace_assistant": (0, 2, 3)}
PERTURBED = {"example_multi_step": 0, "workplace_assistant": 2}
WHERE = ("via_bridge", "native")


def multi_step_plan(row: dict[str, Any]) -> Plan:
    """The calls and final text of the shipped rollout recorded for this row (joined by prompt)."""
    prompt = first_user_text(row["responses_create_params"])
    for rollout in gym_data("example_multi_step", "example_rollouts.jsonl"):
        if first_user_text(rollout["responses_create_params"]) == prompt:
            output = rollout["response"]["output"]
            calls = [(o["name"], json.loads(o["arguments"])) for o in output if o["type"] == "function_call"]
            texts = [p["text"] for o in output if o["type"] == "message" for p in o["content"]]
            return Plan(calls, texts[-1] if texts else "Done.")
    raise AssertionError(f"no shipped rollout for row {row['id']}")


def perturb(env: str, plan: Plan) -> Plan:
    if env == "example_multi_step":  # the right values, in the wrong order
        solution: Solution = [
            (name, {"synonym_values": list(reversed(args["synonym_values"]))})
            if name == "extract_synonym_values"
            else (name, args)
            for name, args in plan.solution
        ]
        return Plan(solution, plan.final_text)
    return Plan(plan.solution[:-1], plan.final_text)  # the last ground-truth action left out


def tagged(row: dict[str, Any], tag: str) -> dict[str, Any]:
    params = {**row["responses_create_params"], "metadata": {PLAN_TAG: tag}}
    return {**row, "responses_create_params": params}


@pytest.fixture(scope="module")
def bridges(log_dir: Path) -> Iterator[dict[str, BridgeProcess]]:
    started = {
        env: BridgeProcess(args=["--resources-server", env]).start(log_dir, timeout=240) for env in ENVS
    }
    yield started
    for bridge in started.values():
        bridge.stop()


def collect(rows: list[dict[str, Any]], head: dict[str, Any], work: Path, label: str) -> list[dict[str, Any]]:
    """``ng_collect_rollouts`` (Gym's own command) over ``rows``; the rollouts it wrote, in row order."""
    inputs = work / f"{label}.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    output = work / f"{label}_rollouts.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_GYM_", "WANDB_"))}
    result = subprocess.run(
        [str(ensure_collect_env() / "ng_collect_rollouts"), f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={output}",
         f"+head_server.host={head['host']}", f"+head_server.port={head['port']}",
         "+upload_rollouts_to_wandb=false", "+num_samples_in_parallel=2"],
        cwd=work, env={**env, "WANDB_MODE": "disabled"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-6000:])
    rollouts = [json.loads(line) for line in output.read_text().splitlines() if line.strip()]
    assert len(rollouts) == len(rows), (len(rollouts), result.stdout[-3000:], result.stderr[-3000:])
    return sorted(rollouts, key=lambda r: r["_ng_task_index"] if "_ng_task_index" in r else r["task_index"])


@dataclass
class Collected:
    cases: list[tuple[str, dict[str, Any], str, Plan]]
    rollouts: dict[str, list[dict[str, Any]]]  # "via_bridge" / "native" -> rollouts in case order
    global_config: dict[str, Any]
    emitted: list[str]
    offered: set[str]


@pytest.fixture(scope="module")
def collected(bridges: dict[str, BridgeProcess], tmp_path_factory: pytest.TempPathFactory) -> Collected:
    """Both collections (through the bridge, and against the Gym servers directly), run once."""
    assert GYM_PYTHON.exists(), "the Gym environment is missing: run 'make setup'"
    ensure_collect_env()  # before the servers start: a first build takes about a minute
    work = tmp_path_factory.mktemp("gym-collect")
    cases: list[tuple[str, dict[str, Any], str, Plan]] = []
    for env in ENVS:
        data = gym_data(env)
        for index in ROWS[env]:
            row = data[index]
            plan = multi_step_plan(row) if env == "example_multi_step" else Plan(ground_truth_solution(row))
            cases.append((env, row, "solution", plan))
            if index == PERTURBED[env]:
                cases.append((env, row, "perturbed", perturb(env, plan)))

    agents: dict[str, dict[str, Any]] = {}
    resources: dict[str, dict[str, Any]] = {}
    for env, bridge in bridges.items():
        native = httpx.URL(upstream_url(bridge.url))
        resources[f"{env}_via_bridge"] = {"env": env, "host": bridge.host, "port": bridge.port}
        resources[f"{env}_native"] = {"env": env, "host": native.host, "port": native.port}
        for where in WHERE:
            agents[f"{env}_{where}_simple_agent"] = {
                "resources": f"{env}_{where}",
                "port": free_port(),
                "max_steps": MAX_STEPS.get(env),
            }

    with StubGymModelServer() as stub:
        for _env, row, tag, plan in cases:
            stub.add(tagged(row, tag)["responses_create_params"], plan)
        plan_json = {
            "head": {"host": "127.0.0.1", "port": free_port()},
            "model": {"host": stub.host, "port": stub.port},
            "resources": resources,
            "agents": agents,
            "ready_file": str(work / "gym-servers.json"),
        }
        rollouts: dict[str, list[dict[str, Any]]] = {}
        with gym_servers(GYM_PYTHON, SERVERS, plan_json, work / "gym-servers.log", 240) as global_config:
            for where in WHERE:
                rows = [
                    {**tagged(row, tag), "agent_ref": {"name": f"{env}_{where}_simple_agent"}}
                    for env, row, tag, _ in cases
                ]
                rollouts[where] = collect(rows, plan_json["head"], work, where)
        assert stub.unknown == [], stub.unknown
    return Collected(cases, rollouts, global_config, stub.emitted, stub.offered)


def test_ng_collect_rollouts_through_the_bridge_scores_as_native(
    bridges: dict[str, BridgeProcess], collected: Collected
) -> None:
    # Gym's config names the bridge as the resources server of the bridged agents
    for env, bridge in bridges.items():
        block = collected.global_config[f"{env}_via_bridge"]["resources_servers"][env]
        assert (block["host"], block["port"]) == (bridge.host, bridge.port)

    expected = [0.0 if tag == "perturbed" else 1.0 for _, _, tag, _ in collected.cases]
    bridged = [r["reward"] for r in collected.rollouts["via_bridge"]]
    native = [r["reward"] for r in collected.rollouts["native"]]
    assert native == expected, native
    assert bridged == native, (bridged, native)
    assert all("_bridge" in r for r in collected.rollouts["via_bridge"])  # verified by the bridge
    assert not any("_bridge" in r for r in collected.rollouts["native"])  # and not by it

    # the names simple_agent offered and called are the Gym tools' own (no prefix to normalize)
    assert {
        name for name, _ in (c for case in collected.cases for c in case[3].solution)
    } <= collected.offered
    for (_env, _row, _tag, plan), via_bridge, direct in zip(
        collected.cases, collected.rollouts["via_bridge"], collected.rollouts["native"], strict=True
    ):
        for rollout in (via_bridge, direct):
            names = [o["name"] for o in rollout["response"]["output"] if o["type"] == "function_call"]
            assert names == [name for name, _ in plan.solution]
        # the same tool outputs through the bridge as from the Gym server directly
        assert tool_outputs(via_bridge) == tool_outputs(direct)
        assert len(tool_outputs(via_bridge)) == len(plan.solution)
        assert via_bridge["_bridge"]["unresolved"] == [] and via_bridge["_bridge"]["normalized"] == {}


def test_the_bridge_keeps_its_session_through_gym_collection(collected: Collected) -> None:
    """simple_agent keeps only the last answer's cookies: the bridge re-sends its session cookie on
    every answer, so every call and the verify stay in the session (call log, provenance)."""
    for (_env, _row, _tag, plan), rollout in zip(
        collected.cases, collected.rollouts["via_bridge"], strict=True
    ):
        report = rollout["_bridge"]
        assert report["recorded_tool_calls"] == len(plan.solution), report
        assert "provenance" in report, report


def tool_outputs(rollout: dict[str, Any]) -> list[str]:
    return [o["output"] for o in rollout["response"]["output"] if o["type"] == "function_call_output"]
