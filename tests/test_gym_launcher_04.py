"""nemo-gym 0.4.0's own launcher (``ng_run``) starts the bridge, and its collector collects through it.

The same road as ``tests/test_gym_launcher.py`` for the 0.4 line, whose launcher resolves a server
folder in the working directory, then its install (no ``NEMO_GYM_EXTRA_ROOTS``), and whose collector
posts rows to the agents themselves (no environment servers): from the project root, ``ng_run
"+config_paths=[examples/gym/nemo-gym-0.4/simple_agent.yaml,<reference>]" +policy_base_url=...``, then
``ng_collect_rollouts``. The launcher and collector are nemo-gym 0.4.0's (``.cache/gym-collect-env``:
the project's Gym environment plus what 0.4.0's collector imports, ``tests/interop/gym_collect_env.py``);
the bridge's entry venv is built by that launcher, so the bridge's upstream runs 0.4.0 too.

nemo-gym 0.4.0 has no in-process MCP exposure, so the reference is Gym's own server for the same
environment, started by the same launcher, driven by ``simple_agent_native`` over Gym's HTTP contract:
rewards equal row by row (shipped rows 0-2: 1.0; the control: 0.0).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.bridges import ROOT
from tests.interop.gym_collect_env import ensure_collect_env
from tests.interop.gym_launcher import (
    Case,
    Launcher,
    agent_in_front_of,
    bridge_audit_log,
    counter_cases,
    policy,
    shipped_rows,
)
from tests.interop.stubs.gym_model_stub import StubPolicyEndpoint

ENV = "example_session_state_mgmt"
EXAMPLE = "examples/gym/nemo-gym-0.4/simple_agent.yaml"
pytestmark = [pytest.mark.launcher, pytest.mark.timeout(1800)]


def reference_config(work: Path) -> Path:
    config = {
        "gym_native": {"resources_servers": {ENV: {"entrypoint": "app.py", "domain": "agent"}}},
        "simple_agent_native": agent_in_front_of(ROOT / EXAMPLE, "simple_agent", "gym_native"),
    }
    path = work / "reference.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def collected(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[Case], dict[str, list[Any]], Path]]:
    python = ensure_collect_env() / "python"
    work = tmp_path_factory.mktemp("gym-launcher-04")
    cases = counter_cases(shipped_rows(python, ENV))
    audit = work / "bridge-audit.jsonl"
    launcher = Launcher(python, "ng_run", work)
    with StubPolicyEndpoint() as stub:
        try:
            overrides = [*policy(stub, cases), bridge_audit_log(audit)]
            launcher.start([EXAMPLE, str(reference_config(work))], overrides, "0.4.0")
            print(f"\nng_run: all servers ready after {launcher.ready_s:.0f}s")
            agents = ["simple_agent", "simple_agent_native"]
            started = time.monotonic()
            rollouts = launcher.collect(agents, cases, "all")
            print(
                f"ng_collect_rollouts (0.4.0): {len(rollouts)} rollouts in {time.monotonic() - started:.0f}s"
            )
            assert stub.unknown == [], stub.unknown
            by_agent = {agent: [rollouts[(agent, case)] for case in range(len(cases))] for agent in agents}
            yield cases, by_agent, audit
        finally:
            launcher.stop()


def test_ng_run_04_starts_the_bridge_and_rewards_equal_native(
    collected: tuple[list[Case], dict[str, list[Any]], Path],
) -> None:
    cases, by_agent, audit = collected
    got = [float(r["reward"]) for r in by_agent["simple_agent"]]
    expected = [float(r["reward"]) for r in by_agent["simple_agent_native"]]
    print(f"\nsimple_agent 0.4.0: bridge {got}, Gym's own server {expected}")
    assert expected == [0.0 if case.kind == "control" else 1.0 for case in cases]
    assert got == expected
    for via_bridge, native in zip(by_agent["simple_agent"], by_agent["simple_agent_native"], strict=True):
        outputs = [
            [o["output"] for o in r["response"]["output"] if o["type"] == "function_call_output"]
            for r in (via_bridge, native)
        ]
        assert outputs[0] == outputs[1] and len(outputs[0]) == 2
        assert via_bridge["_bridge"]["recorded_tool_calls"] == 2
    lines = [json.loads(line) for line in audit.read_text().splitlines() if line.strip()]
    assert len(lines) == 2 * len(cases)  # every bridged call, none of the native rollouts'
