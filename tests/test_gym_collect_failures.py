"""Gym 0.7's collector records a session the bridge lost as a retryable failure, and its resume
scores it as Gym's own server does.

The servers are nemo-gym 0.7.0's own, started as ``gym env start`` starts them
(``tests/interop/gym07_agents.py`` with ``relays``: the head server, one Ray cluster, ``simple_agent``
twice and the ``legacy_agent`` relay Gym generates in front of each): ``simple_agent_bridge`` in
front of a bridge managing Gym 0.7's ``example_session_state_mgmt``, ``simple_agent_inproc`` in front
of the same environment served by Gym itself (with its in-process MCP exposure). The model is a stub
replaying each row's solution (``StubPolicyEndpoint``, not a policy). Collection is Gym's own
``ng_collect_rollouts`` with ``route_failures_to_sidecar``.

Mid-rollout, after the first tool call of one row, the stub kills the bridge's upstream (the bridge
restarts it): that session is lost. Its rollout must land in the collector's failures sidecar,
not terminal, with the bridge's ``session_lost`` and reason in the row, and never in the rollouts
file; ``resume_from_cache`` then re-runs it, and it scores what Gym's own server scores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import ROOT, BridgeProcess, free_port, gym_servers
from tests.fixtures.harness import counter_solution
from tests.interop.gym_launcher import shipped_rows
from tests.interop.stubs.gym_model_stub import Plan, StubPolicyEndpoint, first_user_text

pytestmark = [pytest.mark.launcher, pytest.mark.timeout(1800)]

ENV = "example_session_state_mgmt"
SERVERS = ROOT / "tests" / "interop" / "gym07_agents.py"
ROWS = (0, 1)
VICTIM = 1  # the row whose session is lost mid-run


class RestartingStub(StubPolicyEndpoint):
    """The stub policy, calling ``before_step`` (once per armed prompt) before it answers the model
    request that follows the row's first tool call."""

    def __init__(self) -> None:
        self.armed: dict[str, Callable[[], None]] = {}
        super().__init__()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        step = sum(
            1
            for i in body.get("input") or []
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        )
        hook = self.armed.pop(first_user_text(body), None) if step == 1 else None
        if hook is not None:
            hook()
        return super().answer(body)


def restart_upstream(bridge: BridgeProcess) -> Callable[[], None]:
    """Kill the bridge's managed upstream and wait until the bridge serves a new one."""

    def restart() -> None:
        before = bridge.health()["upstream"]
        os.killpg(int(before["pid"]), signal.SIGKILL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            health = bridge.health()["upstream"]
            replaced = health.get("pid") not in (None, before["pid"]) and health.get("ready")
            if replaced and httpx.get(f"{bridge.url}/readyz", timeout=5).status_code == 200:
                return
            time.sleep(0.2)
        raise AssertionError(f"the bridge's upstream was not back within 300s:\n{bridge.log()[-3000:]}")

    return restart


def collect(
    python: Path, head: dict[str, Any], rows: list[dict[str, Any]], out: Path, *keys: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``ng_collect_rollouts`` over ``rows`` into ``out``: (the rollouts file, the failures sidecar)."""
    given = out.with_name(f"{out.stem}-rows.jsonl")
    given.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = subprocess.run(
        [
            str(python.parent / "ng_collect_rollouts"),
            f"+input_jsonl_fpath={given}",
            f"+output_jsonl_fpath={out}",
            f"+head_server.host={head['host']}",
            f"+head_server.port={head['port']}",
            f"hydra.run.dir={out.parent / 'outputs'}",
            "+route_failures_to_sidecar=true",
            *keys,
        ],
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
    )
    out.with_name(f"{out.stem}-collect.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    sidecar = out.with_name(out.stem + "_failures.jsonl")  # nemo_gym.path_utils.failures_path_for

    def read(path: Path) -> list[dict[str, Any]]:
        return (
            [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if path.exists()
            else []
        )

    return read(out), read(sidecar)


def test_a_lost_session_is_a_retryable_failure_and_resume_scores_it_as_gym(
    gym07_python: Path, log_dir: Path, tmp_path: Path
) -> None:
    rows = [shipped_rows(gym07_python, ENV)[i] for i in ROWS]
    bridge = BridgeProcess(args=["--gym-python", str(gym07_python), "--resources-server", ENV])
    bridge.start(log_dir, timeout=300)
    try:
        with RestartingStub() as stub:
            for row in rows:
                stub.add(row["responses_create_params"], Plan(counter_solution(row)))
            head = {"host": "127.0.0.1", "port": free_port()}
            plan = {
                "head": head,
                "resources": {
                    "bridge": {"env": ENV, "host": bridge.host, "port": bridge.port, "serve": False},
                    "inproc": {"env": ENV, "host": "127.0.0.1", "port": free_port(), "serve": True},
                },
                "models": {"policy_model": {"host": stub.host, "port": stub.port}},
                "agents": {
                    f"simple_agent_{where}": {
                        "agent": "simple_agent",
                        "resources": where,
                        "port": free_port(),
                    }
                    for where in ("bridge", "inproc")
                },
                "relays": True,
                "log_dir": str(tmp_path),
                "ready_file": str(tmp_path / "gym-servers.json"),
                "timeout": 900,
            }
            env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
            with gym_servers(gym07_python, SERVERS, plan, tmp_path / "gym-servers.log", 960, env):
                reference, refused = collect(
                    gym07_python,
                    head,
                    [{**row, "agent_ref": {"name": "simple_agent_inproc"}} for row in rows],
                    tmp_path / "inproc.jsonl",
                )
                assert refused == [] and len(reference) == len(rows)
                expected = {int(r["_ng_task_index"]): float(r["reward"]) for r in reference}
                assert expected == {i: 1.0 for i in range(len(rows))}, expected

                bridged_rows = [{**row, "agent_ref": {"name": "simple_agent_bridge"}} for row in rows]
                victim_prompt = first_user_text(rows[VICTIM]["responses_create_params"])
                stub.armed[victim_prompt] = restart_upstream(bridge)
                out = tmp_path / "bridge.jsonl"
                one_at_a_time = "+num_samples_in_parallel=1"  # no other rollout sees the restart
                first, failed = collect(gym07_python, head, bridged_rows, out, one_at_a_time)
                assert stub.armed == {}, "the victim's rollout never reached its second model call"
                assert [int(r["_ng_task_index"]) for r in first] == [
                    i for i in range(len(rows)) if i != VICTIM
                ]
                assert all(float(r["reward"]) == expected[int(r["_ng_task_index"])] for r in first)
                assert len(failed) == 1, failed
                failure = failed[0]
                print(
                    f"\nsidecar row: {json.dumps({k: v for k, v in failure.items() if k.startswith('_ng_')})[:1500]}"
                )
                assert int(failure["_ng_task_index"]) == VICTIM and "reward" not in failure, failure
                assert not failure.get("_ng_failure_terminal"), "retryable: resume must re-run it"
                said = str(failure.get("_ng_failure_response_body"))
                assert "session_lost" in said and "re-run the rollout from /seed_session" in said, said
                assert "the upstream resources server restarted" in said, said

                resumed, failed_again = collect(
                    gym07_python, head, bridged_rows, out, one_at_a_time, "+resume_from_cache=true"
                )
                assert failed_again == failed, "the resume added no failure"
                scored = {int(r["_ng_task_index"]): float(r["reward"]) for r in resumed}
                assert scored == expected, (scored, expected)
    finally:
        bridge.stop()
