"""Verifiers (PyPI ``verifiers`` 0.4.0) running whole rollouts with the bridge as its NeMo Gym
resources server.

Verifiers runs in its own environment (``.cache/verifiers-env``: 0.4.0 pins ``mcp==2.0.0``, the
bridge needs ``mcp>=2.3``), driven by ``tests/interop/verifiers_rollout.py``: Verifiers' own eval
entry point (``run_eval``) with its NeMo Gym taskset (``verifiers.v1.tasksets.nemo_gym``) on a
one-row dataset, its ``null`` harness (its bundled chat program: agent loop, MCP client, OpenAI
client) in a subprocess runtime, and its interception server relaying the model calls to a
**stub model**: a local Chat Completions API (``tests/interop/stubs/openai_chat_stub.py``) that
answers each turn with the next call solving the row, read from the row (counter:
``increment_counter(expected - initial)``, ``get_counter_value``; ``workplace_assistant``: the
row's ``ground_truth`` calls). The reward is the taskset's own ``nemo_gym`` reward: ``/verify``
with ``trace_to_nemo_response(trace)``.

The same rows run three ways, ``task.resources_url`` being:

* ``mcp``: the bridge. Verifiers seeds, finds the answer's ``mcp`` block and calls the tools at
  ``resources_url + mcp.url_path`` with ``mcp.headers`` (the session token) over MCP;
* ``http``: the bridge, tools on Gym's HTTP contract (``POST /<tool>`` with the seed answer's
  cookies). Verifiers 0.4.0 has no switch for it once the seed answer has an ``mcp`` block (the
  bridge's always has), so this runs taskset ``verifiers_gym_http``
  (``tests/interop/verifiers_gym_http.py``: the same task, forgetting the MCP endpoint after
  ``setup``);
* ``native``: the Gym server behind the bridge, directly (Gym 0.4.0's seed answer has no ``mcp``
  block, so Verifiers takes its HTTP branch by itself).

Bridged rewards must equal the native ones: 1.0 for the solutions, 0.0 when the stub solves
another row.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import HEADER, ROOT, BridgeProcess, gym_data, upstream_url
from tests.fixtures.harness import Solution, counter_solution, ground_truth_solution
from tests.interop.stubs.openai_chat_stub import StubChatCompletions
from tests.interop.verifiers_env import ensure_verifiers_env, runner_env

pytestmark = pytest.mark.evaluator

VERIFIERS_VERSION = "0.4.0"
ROLLOUT = ROOT / "tests" / "interop" / "verifiers_rollout.py"
API_KEY_VAR = "VF_STUB_API_KEY"  # as in verifiers_rollout.py
MODES = ("mcp", "http", "native")
TASKSET = {"mcp": "nemo-gym", "http": "verifiers_gym_http", "native": "nemo-gym"}
ENVS = ("example_session_state_mgmt", "workplace_assistant")


@dataclass
class Case:
    env: str
    row: dict[str, Any]
    tag: str  # "solution" or "perturbed"
    solution: Solution

    @property
    def expected(self) -> float:
        return 0.0 if self.tag == "perturbed" else 1.0

    def model(self, mode: str) -> str:  # the stub's plan for this case and mode
        return f"stub-{self.env}-{self.tag}-{mode}"


def cases() -> list[Case]:
    counter = gym_data("example_session_state_mgmt")
    workplace = gym_data("workplace_assistant")
    return [
        Case("example_session_state_mgmt", counter[0], "solution", counter_solution(counter[0])),  # 3 -> 6
        # row 1's solution (increment by 9) in row 0's session: 3 -> 12
        Case("example_session_state_mgmt", counter[0], "perturbed", counter_solution(counter[1])),
        Case("workplace_assistant", workplace[0], "solution", ground_truth_solution(workplace[0])),
        # row 1's ground truth (calendar_update_event) for row 0 (email_reply_email)
        Case("workplace_assistant", workplace[0], "perturbed", ground_truth_solution(workplace[1])),
    ]


@pytest.fixture(scope="module")
def verifiers_python() -> Path:
    """The Verifiers environment; under ``CI=true`` a failed build fails, elsewhere it skips."""
    try:
        return ensure_verifiers_env()
    except (AssertionError, OSError, subprocess.SubprocessError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Verifiers environment could not be built under CI=true: {exc}")
        pytest.skip(f"the Verifiers environment could not be built here: {exc}")


def tool_calls_by_transport(bridge: BridgeProcess) -> dict[str, float]:
    text = httpx.get(f"{bridge.url}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for match in re.finditer(r"^gym_mcp_bridge_tool_calls_total\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        totals[labels["transport"]] = totals.get(labels["transport"], 0.0) + float(match.group(2))
    return totals


@dataclass
class Measured:
    cases: list[Case]
    results: dict[tuple[str, str], dict[str, Any]]  # (mode, model) -> the rollout's result
    transports: dict[str, dict[str, dict[str, float]]]  # mode -> env -> bridge tool calls by transport
    stub: StubChatCompletions
    bridges: dict[str, BridgeProcess]
    seconds: dict[str, float]


def run_verifiers(python: Path, plan: dict[str, Any], work: Path, mode: str) -> list[dict[str, Any]]:
    path = work / f"plan-{mode}.json"
    path.write_text(json.dumps(plan))
    log = work / f"verifiers-{mode}.log"
    with log.open("w") as stderr:
        result = subprocess.run(
            [str(python), str(ROLLOUT), str(path)], cwd=work, env=runner_env(API_KEY_VAR),
            stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=900,
        )  # fmt: skip
    assert result.returncode == 0, (result.stdout[-3000:], log.read_text(errors="replace")[-6000:])
    found = [
        json.loads(line.removeprefix("VERIFIERS_RESULT "))
        for line in result.stdout.splitlines()
        if line.startswith("VERIFIERS_RESULT ")
    ]
    assert len(found) == len(plan["runs"]), (result.stdout[-3000:], log.read_text(errors="replace")[-6000:])
    return found


@pytest.fixture(scope="module")
def measured(
    verifiers_python: Path,
    counter_bridge: BridgeProcess,
    workplace_bridge: BridgeProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Measured]:
    """Every case in every mode, one Verifiers process per mode (bridge metrics read between)."""
    bridges = {"example_session_state_mgmt": counter_bridge, "workplace_assistant": workplace_bridge}
    work = tmp_path_factory.mktemp("verifiers")
    all_cases = cases()
    results: dict[tuple[str, str], dict[str, Any]] = {}
    transports: dict[str, dict[str, dict[str, float]]] = {}
    seconds: dict[str, float] = {}
    with StubChatCompletions() as stub:
        for mode in MODES:
            runs = []
            for case in all_cases:
                bridge = bridges[case.env]
                stub.add(case.model(mode), case.solution)
                url = upstream_url(bridge.url) if mode == "native" else bridge.url
                runs.append({
                    "label": case.model(mode), "taskset": TASKSET[mode], "resources_url": url,
                    "row": case.row, "model": case.model(mode), "max_turns": len(case.solution) + 3,
                })  # fmt: skip
            before = {env: tool_calls_by_transport(b) for env, b in bridges.items()}
            started = time.monotonic()
            plan = {"stub_base_url": stub.base_url, "work_dir": str(work), "runs": runs}
            for result in run_verifiers(verifiers_python, plan, work, mode):
                results[(mode, result["label"])] = result
            seconds[mode] = time.monotonic() - started
            after = {env: tool_calls_by_transport(b) for env, b in bridges.items()}
            transports[mode] = {
                env: {t: after[env].get(t, 0.0) - before[env].get(t, 0.0) for t in ("mcp", "http")}
                for env in bridges
            }
        print(f"\nverifiers rollouts per mode (seconds, {len(all_cases)} rollouts each): {seconds}")
        yield Measured(all_cases, results, transports, stub, bridges, seconds)


def test_verifiers_rollouts_complete_and_bridged_rewards_equal_native(measured: Measured) -> None:
    assert measured.stub.unknown == [], measured.stub.unknown
    table = []
    for case in measured.cases:
        rewards = {}
        for mode in MODES:
            result = measured.results[(mode, case.model(mode))]
            assert result["verifiers"] == VERIFIERS_VERSION
            assert result["ok"] and result["errors"] == [], result
            assert result["stop_condition"] == "agent_completed", result
            assert set(result["rewards"]) == {"nemo_gym"}, result["rewards"]  # the taskset's reward
            assert result["harness_packages"]["mcp"] == "2.0.0", result["harness_packages"]
            rewards[mode] = result["reward"]
        table.append((case.env, case.tag, rewards))
        assert rewards["native"] == case.expected, (case.env, case.tag, rewards)
        assert rewards["mcp"] == rewards["http"] == rewards["native"], (case.env, case.tag, rewards)
    print("\n" + "\n".join(f"{env} {tag}: {rewards}" for env, tag, rewards in table))
    any_result = next(iter(measured.results.values()))
    print(f"null harness script packages (resolved by Verifiers' uv): {any_result['harness_packages']}")


def test_verifiers_reaches_the_bridge_over_mcp_from_the_seed_metadata(measured: Measured) -> None:
    """Verifiers builds its MCP endpoint as ``resources_url + mcp.url_path`` with ``mcp.headers``:
    the bridge's ``/mcp`` and the session token; all calls of those runs reached the bridge over
    MCP (and those of the ``http`` runs over ``POST /<tool>``)."""
    for case in measured.cases:
        bridge = measured.bridges[case.env]
        mcp = measured.results[("mcp", case.model("mcp"))]
        http = measured.results[("http", case.model("http"))]
        native = measured.results[("native", case.model("native"))]
        assert mcp["mcp_url"] == f"{bridge.url}/mcp", mcp["mcp_url"]
        assert http["mcp_url"] is None and http["info"]["seed_mcp_url"] == f"{bridge.url}/mcp"
        assert native["mcp_url"] is None  # Gym 0.4.0's own seed answer has no mcp block
    for env, bridge in measured.bridges.items():
        calls = sum(len(c.solution) for c in measured.cases if c.env == env)
        assert measured.transports["mcp"][env] == {"mcp": calls, "http": 0}, measured.transports
        assert measured.transports["http"][env] == {"mcp": 0, "http": calls}, measured.transports
        assert measured.transports["native"][env] == {"mcp": 0, "http": 0}, measured.transports
        # what Verifiers reads from the seed answer: url_path and headers (the session token)
        seed = bridge.seed(gym_data(env)[0])["mcp"]
        assert seed["url_path"] == "/mcp" and set(seed["headers"]) == {HEADER}, seed


def test_the_bridge_verifies_every_verifiers_rollout_in_its_session(measured: Measured) -> None:
    """Verifiers sends ``/verify`` with the seed answer's cookies only (no session header): the
    bridge finds the session by its cookie, logs every call of the rollout and signs them."""
    for case in measured.cases:
        for mode in ("mcp", "http"):
            report = measured.results[(mode, case.model(mode))]["info"]["nemo_gym"]["_bridge"]
            assert report["normalized"] == {} and report["unresolved"] == [], report
            assert report["recorded_tool_calls"] == len(case.solution), report
            assert not report["agent_never_ran"], report
            calls = report["provenance"]["calls"]
            assert len(calls) == len(case.solution) and all(c["served"] for c in calls.values()), report
        assert "_bridge" not in measured.results[("native", case.model("native"))]["info"]["nemo_gym"]


def test_verifiers_offers_and_emits_bare_tool_names(measured: Measured) -> None:
    """The ``null`` harness names an MCP tool ``<server>_<tool>``, and the NeMo Gym toolset's
    server name is empty (``TOOL_PREFIX = None``): the model is offered, and calls, the Gym tools'
    own names, in every mode; nothing to normalize (no client-names fixture needed)."""
    for case in measured.cases:
        session_tools = [t["name"] for t in case.row["responses_create_params"]["tools"]]
        for mode in MODES:
            result = measured.results[(mode, case.model(mode))]
            plan = measured.stub.plans[case.model(mode)]
            assert sorted(result["offered"]) == sorted(session_tools), (mode, result["offered"])
            assert all(sorted(offered) == sorted(session_tools) for offered in plan.offered), mode
            expected = [name for name, _ in case.solution]
            assert plan.emitted == expected and result["emitted"] == expected, (mode, plan.emitted)
