"""Gym 0.7's own collection command, ``ng_collect_rollouts`` (``gym eval run --no-serve``) of nemo-gym
0.7.0, collects rollouts through the bridge (issue 21, item 1).

Real parts: the nemo-gym 0.7.0 environment the project builds (``gym07_python``), its
``ng_collect_rollouts``, its head server, its ``simple_agent`` agent servers and the ``legacy_agent``
environment server in front of each (``tests/interop/gym07_collect_servers.py`` says how they are
started and what is left out: one process for all, no Ray), and the resources server of the shipped
environment ``example_session_state_mgmt`` run by nemo-gym 0.7.0. The model is a stub of Gym's
model-server contract (``tests/interop/stubs/gym_model_stub.py``) replaying each row's solution
(``counter_solution``: increment by ``expected_count - initial_count``, then read the count); it is not
a policy.

Two agents, identical but for their resources server in Gym's config: ``bridge_agent`` (the bridge in
managed mode on a nemo-gym 0.7.0 upstream) and ``native_agent`` (that same Gym server, directly). One
collection over rows 0-2 of the shipped data for each agent, plus row 0 perturbed (incremented one
short: 0.0): the rewards Gym writes must be equal row by row, with the bridged calls in the bridge's
audit log. Then the same collection with ``observability_enabled: true`` in the Gym config: every
request Gym's client sends to a resources server goes under ``/ng-rollout/<rollout id>/``; the ids
(``<task index>-<rollout index>``, Gym's own) must reach the bridge's audit log and the provenance it
returns, and the rewards must still match. The two collections run side by side, each with its own
Gym servers process and config, against the one bridge.

Why the environment servers (the "hang" of the previous session): nemo-gym 0.7.0's collection posts a
row to its agent's *environment server*, never to the agent itself
(nemo-gym 0.7.0 ``nemo_gym/rollout_collection.py:3383-3402``, ``_run_examples_with_metadata``:
``server_for_agent[...]`` from ``_environment_server_for_agent``, posted at :3427); a config without
one gets a generated ``legacy_agent`` relay named ``<agent>_environment_server``
(``global_config.py:1132``). Servers started without that relay leave the collection retrying a
refused connection every 0.5 s for ever (``server_utils.py:615-629``, ``_request_with_retries``, the
``ClientOSError`` branch, no cap by default), printing one line per 100 failures (:435). Measured with py-spy (idle in ``EpollSelector.select``) and strace (``connect`` to the
relay's port twice a second). Not a Gym bug one cannot configure around: the relay is part of the
user's config (``gym env start`` starts it).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, BridgeProcess, free_port, gym_servers
from tests.interop.stubs.common import counter_solution, upstream_url
from tests.interop.stubs.gym_model_stub import PLAN_TAG, Plan, StubGymModelServer

ENV = "example_session_state_mgmt"
SERVERS = ROOT / "tests" / "interop" / "gym07_collect_servers.py"
ROWS = (0, 1, 2)
PERTURBED = 0
WHERE = ("bridge", "native")
pytestmark = pytest.mark.timeout(1200)  # Gym 0.7 processes start slowly on a loaded 2-core machine


@dataclass
class Collection:
    rollouts: dict[str, list[dict[str, Any]]]  # "bridge" / "native" -> rollouts in case order
    global_config: dict[str, Any]


@dataclass
class Collected:
    cases: list[tuple[int, str, Plan]]  # (row index, "solution" / "perturbed", plan)
    plain: Collection
    observed: Collection  # observability_enabled: true
    audit: list[dict[str, Any]]  # the bridge's audit log, both collections
    model_paths: list[str]  # the stub model's request paths, both collections


def shipped_rows(gym07_python: Path) -> list[dict[str, Any]]:
    """The environment's rows as nemo-gym 0.7.0 ships them."""
    site = next((gym07_python.parent.parent / "lib").glob("python3.*/site-packages"))
    path = site / "resources_servers" / ENV / "data" / "example.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tagged(row: dict[str, Any], tag: str) -> dict[str, Any]:
    params = {**row["responses_create_params"], "metadata": {PLAN_TAG: tag}}
    return {**row, "responses_create_params": params}


def collect(
    python: Path, rows: list[dict[str, Any]], head: dict[str, Any], work: Path
) -> list[dict[str, Any]]:
    """``ng_collect_rollouts`` of nemo-gym 0.7.0 over ``rows``; the rollouts it wrote, in row order."""
    inputs, output = work / "rows.jsonl", work / "rollouts.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_GYM_", "WANDB_"))}
    result = subprocess.run(
        [str(python.parent / "ng_collect_rollouts"), f"+input_jsonl_fpath={inputs}",
         f"+output_jsonl_fpath={output}", f"+head_server.host={head['host']}",
         f"+head_server.port={head['port']}", "+num_samples_in_parallel=4"],
        cwd=work, env={**env, "WANDB_MODE": "disabled"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-6000:])
    rollouts = [json.loads(line) for line in output.read_text().splitlines() if line.strip()]
    assert len(rollouts) == len(rows), (len(rollouts), result.stdout[-3000:], result.stderr[-3000:])
    return sorted(rollouts, key=lambda r: int(r["_ng_task_index"]))


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gym07-collect-audit") / "audit.jsonl"


@pytest.fixture(scope="module")
def bridge(gym07_python: Path, log_dir: Path, audit_log: Path) -> Iterator[BridgeProcess]:
    """The bridge in managed mode on a nemo-gym 0.7.0 upstream, with its audit log."""
    args = ["--gym-python", str(gym07_python), "--resources-server", ENV, "--audit-log", str(audit_log)]
    started = BridgeProcess(args=args).start(log_dir, timeout=300)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def collected(
    bridge: BridgeProcess, gym07_python: Path, audit_log: Path, tmp_path_factory: pytest.TempPathFactory
) -> Collected:
    rows = shipped_rows(gym07_python)
    cases: list[tuple[int, str, Plan]] = []
    for index in ROWS:
        solution = counter_solution(rows[index])
        cases.append((index, "solution", Plan(solution)))
        if index == PERTURBED:  # one short of the expected count
            (name, args), *rest = solution
            cases.append((index, "perturbed", Plan([(name, {"count": args["count"] - 1}), *rest])))
    native = httpx.URL(upstream_url(bridge.url))
    resources = {
        "bridge": {"env": ENV, "host": bridge.host, "port": bridge.port},
        "native": {"env": ENV, "host": native.host, "port": native.port},
    }

    def servers_plan(stub: StubGymModelServer, observability: bool, work: Path) -> dict[str, Any]:
        return {
            "head": {"host": "127.0.0.1", "port": free_port()},
            "model": {"host": stub.host, "port": stub.port},
            "observability": observability,
            "resources": resources,
            "agents": {
                f"{where}_agent": {"resources": where, "port": free_port(), "relay_port": free_port()}
                for where in WHERE
            },
            "ready_file": str(work / "gym-servers.json"),
        }

    def collection(plan: dict[str, Any]) -> Collection:
        work = Path(plan["ready_file"]).parent
        with gym_servers(gym07_python, SERVERS, plan, work / "gym-servers.log", 600) as global_config:
            rows_in = [
                {**tagged(rows[index], tag), "agent_ref": {"name": f"{where}_agent"}}
                for where in WHERE
                for index, tag, _ in cases
            ]
            out = collect(gym07_python, rows_in, plan["head"], work)
        split = {where: out[i * len(cases) : (i + 1) * len(cases)] for i, where in enumerate(WHERE)}
        return Collection(split, global_config)

    with StubGymModelServer() as stub:
        for index, tag, plan in cases:
            stub.add(tagged(rows[index], tag)["responses_create_params"], plan)
        plans = [
            servers_plan(stub, observability, tmp_path_factory.mktemp(name))
            for observability, name in ((False, "gym07-collect"), (True, "gym07-collect-observed"))
        ]
        # the two collections side by side (two cores), each with its own Gym servers and config
        with ThreadPoolExecutor(2) as pool:
            plain, observed = pool.map(collection, plans)
        assert stub.unknown == [], stub.unknown
        model_paths = list(stub.paths)
    audit = [json.loads(line) for line in audit_log.read_text().splitlines() if line.strip()]
    return Collected(cases, plain, observed, audit, model_paths)


def rewards(collection: Collection, where: str) -> list[float]:
    return [float(r["reward"]) for r in collection.rollouts[where]]


def test_ng_collect_rollouts_07_through_the_bridge_scores_as_native(
    bridge: BridgeProcess, collected: Collected
) -> None:
    # Gym's config names the bridge as the resources server of the bridged agent
    block = collected.plain.global_config["bridge"]["resources_servers"][ENV]
    assert (block["host"], block["port"]) == (bridge.host, bridge.port)

    expected = [0.0 if tag == "perturbed" else 1.0 for _, tag, _ in collected.cases]
    for collection in (collected.plain, collected.observed):
        print(f"\nbridge {rewards(collection, 'bridge')} native {rewards(collection, 'native')}")
        assert rewards(collection, "native") == expected
        assert rewards(collection, "bridge") == rewards(collection, "native")
        for (_index, _tag, plan), via_bridge, direct in zip(
            collected.cases, collection.rollouts["bridge"], collection.rollouts["native"], strict=True
        ):
            for rollout in (via_bridge, direct):
                names = [o["name"] for o in rollout["response"]["output"] if o["type"] == "function_call"]
                assert names == [name for name, _ in plan.solution]
            assert tool_outputs(via_bridge) == tool_outputs(direct)  # the same answers both ways
            assert via_bridge["_bridge"]["recorded_tool_calls"] == len(plan.solution)
            assert "_bridge" not in direct

    # every bridged call is in the bridge's audit log: 2 per rollout, per collection
    assert len(collected.audit) == 2 * 2 * len(collected.cases), collected.audit


def test_observability_rollout_ids_reach_the_bridge(collected: Collected) -> None:
    """With ``observability_enabled: true`` Gym's own rollout id (``<task>-<rollout>``) prefixes every
    resources-server request; the bridge keeps it in its audit log and in the provenance it returns."""
    bridged = collected.observed.rollouts["bridge"]
    ids = [f"{r['_ng_task_index']}-{r['_ng_rollout_index']}" for r in bridged]
    assert len(set(ids)) == len(bridged)
    for rollout_id, rollout in zip(ids, bridged, strict=True):
        assert rollout["_bridge"]["provenance"]["rollout_id"] == rollout_id, rollout["_bridge"]
    for rollout in collected.plain.rollouts["bridge"]:
        assert "rollout_id" not in rollout["_bridge"]["provenance"]

    with_id = [line for line in collected.audit if "rollout_id" in line]
    assert sorted(line["rollout_id"] for line in with_id) == sorted(ids * 2)  # both calls of each
    assert len(collected.audit) - len(with_id) == 2 * len(collected.cases)  # the plain collection's
    # Gym's client prefixed the model calls too (the stub records them), and only with observability:
    # 3 model calls a rollout (two tool calls, the final text) in each collection
    prefixed = [p for p in collected.model_paths if p.startswith("POST /ng-rollout/")]
    assert {p.split("/")[2] for p in prefixed} >= set(ids)
    assert len(prefixed) == len(collected.model_paths) - len(prefixed) == 3 * 2 * len(collected.cases)


def tool_outputs(rollout: dict[str, Any]) -> list[str]:
    return [o["output"] for o in rollout["response"]["output"] if o["type"] == "function_call_output"]
