"""Gym 0.7's collector records a session whose replica was killed as a retryable failure, and its
resume scores it as Gym's own server does.

The servers are nemo-gym 0.7.0's own, started as ``gym env start`` starts them
(``tests/interop/gym07_agents.py`` with ``relays``: the head server, one Ray cluster, ``simple_agent``
twice and the ``legacy_agent`` relay Gym generates in front of each): ``simple_agent_bridge`` in
front of two bridge replicas behind a round-robin balancer (a Service without affinity; each replica
manages its own Gym 0.7 ``example_session_state_mgmt``), ``simple_agent_inproc`` in front of the same
environment served by Gym itself (with its in-process MCP exposure). The model is a stub replaying
each row's solution (``StubPolicyEndpoint``, not a policy). Collection is Gym's own
``ng_collect_rollouts`` with ``route_failures_to_sidecar``.

Mid-rollout, after the first tool call of one row, the stub SIGKILLs the replica that owns that
row's session (a lost node, an OOM kill: no grace period). The row's next call reaches the other
replica, which cannot forward it to the owner. Its rollout must land in the collector's failures
sidecar, not terminal, with the bridge's ``transport_unreachable`` and reason in the row, and never
in the rollouts file; ``resume_from_cache`` then re-runs it on the replica left, and it scores what
Gym's own server scores. (``tests/test_gym_launcher.py`` walks the other way to lose a session, an
upstream restarted under the bridge ``gym env start`` launched.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.balancer import Balancer
from tests.fixtures.bridges import ROOT, BridgeProcess, free_port, gym_servers, read_jsonl
from tests.fixtures.harness import counter_solution
from tests.interop.gym_launcher import shipped_rows
from tests.interop.stubs.gym_model_stub import Plan, StubPolicyEndpoint, first_user_text

pytestmark = [pytest.mark.launcher, pytest.mark.timeout(1800)]

ENV = "example_session_state_mgmt"
SERVERS = ROOT / "tests" / "interop" / "gym07_agents.py"
ROWS = (0, 1)
VICTIM = 1  # the row whose owner replica is killed mid-run


def last_call_at(audit: Path) -> str:
    """When the replica writing ``audit`` last served a tool call (ISO 8601 UTC, comparable as text)."""
    lines = audit.read_text().splitlines() if audit.exists() else []
    return str(json.loads(lines[-1])["time"]) if lines else ""


def kill_owner(
    replicas: list[BridgeProcess], audits: list[Path], killed: list[BridgeProcess]
) -> Callable[[], None]:
    """A hook that SIGKILLs the replica that served the latest tool call, and its upstream: with one
    rollout at a time, the owner of the session in progress (a forwarded call is served, and
    logged, by the owner)."""

    def kill() -> None:
        owner = replicas[max(range(len(replicas)), key=lambda i: last_call_at(audits[i]))]
        upstream = int(owner.health()["upstream"]["pid"])
        owner.stop(signal.SIGKILL)  # the pod goes, and its resources server with it
        os.killpg(upstream, signal.SIGKILL)
        killed.append(owner)

    return kill


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
    return read_jsonl(out), read_jsonl(sidecar)


def replicas_of(gym07_python: Path, log_dir: Path, audits: list[Path]) -> list[BridgeProcess]:
    """Two replicas as a StatefulSet runs them: one secret, each its own advertise URL and upstream."""
    replicas = []
    for audit in audits:
        port = free_port()
        args = ["--gym-python", str(gym07_python), "--resources-server", ENV]
        args += ["--advertise-url", f"http://127.0.0.1:{port}"]
        replicas.append(
            BridgeProcess(args=args, port=port, env={"GYM_MCP_BRIDGE_AUDIT_LOG": str(audit)}).start(
                log_dir, wait_ready=False
            )
        )
    for replica in replicas:
        replica.wait_ready(300)
    return replicas


def test_a_session_whose_replica_died_is_a_retryable_failure_and_resume_scores_it_as_gym(
    gym07_python: Path, log_dir: Path, tmp_path: Path
) -> None:
    rows = [shipped_rows(gym07_python, ENV)[i] for i in ROWS]
    audits = [tmp_path / f"replica-{i}-audit.jsonl" for i in range(2)]
    replicas = replicas_of(gym07_python, log_dir, audits)
    killed: list[BridgeProcess] = []
    try:
        with StubPolicyEndpoint() as stub, Balancer([r.url for r in replicas]) as balancer:
            for row in rows:
                stub.add(row["responses_create_params"], Plan(counter_solution(row)))
            head = {"host": "127.0.0.1", "port": free_port()}
            plan = {
                "head": head,
                "resources": {
                    "bridge": {"env": ENV, "host": "127.0.0.1", "port": balancer.port, "serve": False},
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
                stub.armed[victim_prompt] = kill_owner(replicas, audits, killed)
                out = tmp_path / "bridge.jsonl"
                one_at_a_time = "+num_samples_in_parallel=1"  # the owner of the one session in progress
                first, failed = collect(gym07_python, head, bridged_rows, out, one_at_a_time)
                assert stub.armed == {} and len(killed) == 1, (
                    "the victim's rollout never reached its second call"
                )
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
                assert "transport_unreachable" in said and "re-run the rollout from /seed_session" in said, (
                    said
                )
                assert f"owner replica {killed[0].url} of this session is unreachable" in said, said

                resumed, failed_again = collect(
                    gym07_python, head, bridged_rows, out, one_at_a_time, "+resume_from_cache=true"
                )
                assert failed_again == failed, "the resume added no failure"
                scored = {int(r["_ng_task_index"]): float(r["reward"]) for r in resumed}
                assert scored == expected, (scored, expected)
                survivor = next(r for r in replicas if r is not killed[0])
                assert last_call_at(audits[replicas.index(survivor)]) > last_call_at(
                    audits[replicas.index(killed[0])]
                ), "the re-run was served by the replica left"
    finally:
        for replica in replicas:
            replica.stop()
