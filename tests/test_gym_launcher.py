"""Gym's own launcher starts the bridge, and Gym's own collector collects through it (nemo-gym 0.7.0).

The road a Gym user takes, nothing started by the test but the model stub and (for the remote mode)
a bridge that stands for one in Compose or Kubernetes: from the project root, ``gym env start
"+config_paths=[examples/gym/simple_agent.yaml,examples/gym/claude_code_agent.yaml,examples/gym/
codex_agent.yaml,<the reference config>]" +policy_base_url=... +policy_api_key=... +policy_model_name=...``,
then ``ng_collect_rollouts`` over rows that name their agent (``tests/interop/gym_launcher.py`` lists
the launcher keys the test adds, and why). The launcher builds every server's venv (the bridge's entry
included: ``resources_servers/gym_mcp_bridge``), starts Ray, the head server, Gym's ``openai_model``
(the real model server, in front of a stub Responses endpoint: ``StubPolicyEndpoint``, not a policy),
the agents with their environment-server relays, and the bridge, which runs its upstream
(``example_session_state_mgmt``) on the entry venv's nemo-gym 0.7.0.

The reference config, written by the test from the example files: the same three agents, each
pointed at ``gym_in_process``, the same environment started by the same launcher with Gym 0.7.0's
in-process MCP exposure (``expose_tools_over_mcp: true``). Expected rewards come from there, row by
row; the rows are the environment's shipped ``data/example.jsonl`` rows 0-2 (the stub replays each
row's solution: 1.0) and a control (row 0 under another prompt, for which the stub increments one
short: 0.0). The CLIs: Claude Code 2.1.332 (``claude_code_agent`` pins none) and Codex 0.144.4
(``codex_agent``'s own pin), from the npm registry.

On the same launch, a session lost mid-run: the launched bridge's upstream killed after a row's
first tool call, collected with Gym's failures sidecar and resumed.

Two launches: plain, and with ``observability_enabled: true`` (every Gym request to a resources server
under ``/ng-rollout/<rollout id>/``; Gym's model servers and collector then require
``model_call_capture_dir``, and the model server captures every model call there).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.bridges import ROOT, BridgeProcess, read_jsonl, restart_upstream
from tests.interop.gym_launcher import (
    Launcher,
    agent_in_front_of,
    bridge_audit_log,
    counter_cases,
    in_process_exposure,
    policy,
    shipped_rows,
)
from tests.interop.node import installed_cli
from tests.interop.stubs.gym_model_stub import StubPolicyEndpoint, first_user_text

ENV = "example_session_state_mgmt"
AGENTS = ("simple_agent", "claude_code_agent", "codex_agent")
BRIDGE = "gym_mcp_bridge"  # the bridge's instance name in the example configs
IN_PROCESS = "gym_in_process"
REMOTE = "gym_mcp_bridge_remote"
EXAMPLES = ROOT / "examples" / "gym"
CLAUDE_VERSION = "2.1.332"
CODEX_VERSION = "0.144.4"  # nemo-gym 0.7.0's codex_agent pin (configs/codex_agent.yaml)
pytestmark = [pytest.mark.launcher, pytest.mark.npm, pytest.mark.timeout(2400)]


@dataclass
class Launched:
    observability: bool
    launcher: Launcher
    rollouts: dict[tuple[str, int], dict[str, Any]]  # (agent instance, case index) -> rollout
    audit: list[dict[str, Any]]  # the launched bridge's audit log
    remote_audit: list[dict[str, Any]]
    cases: list[str]  # "solution" / "control", per case index
    rows: list[dict[str, Any]]  # the row of each case
    remote: BridgeProcess  # the bridge the remote-mode instance watches
    stub: StubPolicyEndpoint


def reference_config(work: Path, remote: BridgeProcess) -> Path:
    """The three example agents again, each in front of Gym's own in-process MCP exposure of the same
    environment, and simple_agent in front of ``remote``, a bridge already running (the remote mode)."""
    config = in_process_exposure(ENV, IN_PROCESS, {agent: EXAMPLES / f"{agent}.yaml" for agent in AGENTS})
    config[REMOTE] = {
        "resources_servers": {
            BRIDGE: {
                "entrypoint": "app.py",
                "domain": "agent",
                "host": remote.host,
                "port": remote.port,
                "bridge_url": remote.url,
                "watch_interval_s": 1,
            }
        }
    }
    config["simple_agent_remote"] = agent_in_front_of(EXAMPLES / "simple_agent.yaml", "simple_agent", REMOTE)
    path = work / "reference.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def agent_instances() -> list[str]:
    return [*(name for agent in AGENTS for name in (agent, f"{agent}_in_process")), "simple_agent_remote"]


@pytest.fixture(scope="module")
def clis() -> list[str]:
    claude = installed_cli("claude-code", "claude", f"{CLAUDE_VERSION} (Claude Code)")
    codex = installed_cli("codex-gym", "codex", f"codex-cli {CODEX_VERSION}")
    return [str(Path(claude).parent), str(Path(codex).parent)]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "observability"])
def launched(
    request: pytest.FixtureRequest,
    gym07_python: Path,
    clis: list[str],
    log_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Launched]:
    observability: bool = request.param
    work = tmp_path_factory.mktemp("gym-launcher-observability" if observability else "gym-launcher")
    # a bridge started apart from the launcher, as Compose or Kubernetes runs one (the remote mode)
    remote_audit = work / "remote-bridge-audit.jsonl"
    remote = BridgeProcess(
        args=["--gym-python", str(gym07_python), "--server-name", REMOTE],
        env={"GYM_MCP_BRIDGE_AUDIT_LOG": str(remote_audit)},
    ).start(log_dir, timeout=300)
    cases = counter_cases(shipped_rows(gym07_python, ENV))
    audit = work / "bridge-audit.jsonl"
    overrides = [bridge_audit_log(audit)]
    if observability:
        overrides += ["++observability_enabled=true", f"++model_call_capture_dir={work / 'model-calls'}"]
    launcher = Launcher(gym07_python, "gym env start", work, path=clis)
    config_paths = [f"examples/gym/{agent}.yaml" for agent in AGENTS] + [str(reference_config(work, remote))]
    with StubPolicyEndpoint() as stub:
        try:
            launcher.start(config_paths, policy(stub, cases) + overrides, "0.7.0")
            print(f"\ngym env start: all servers ready after {launcher.ready_s:.0f}s")
            started = time.monotonic()
            rollouts = launcher.collect(agent_instances(), cases, "all")
            print(f"ng_collect_rollouts: {len(rollouts)} rollouts in {time.monotonic() - started:.0f}s")
            assert stub.unknown == [], stub.unknown
            yield Launched(
                observability,
                launcher,
                rollouts,
                read_jsonl(audit),
                read_jsonl(remote_audit),
                [case.kind for case in cases],
                [case.row for case in cases],
                remote,
                stub,
            )
        finally:
            launcher.stop()
            remote.stop()


def function_calls(rollout: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in rollout["response"]["output"] if o.get("type") == "function_call"]


def tool_outputs(rollout: dict[str, Any]) -> list[str]:
    return [o["output"] for o in rollout["response"]["output"] if o.get("type") == "function_call_output"]


@pytest.mark.parametrize("agent", AGENTS)
def test_rewards_through_the_launched_bridge_equal_gyms_in_process_mcp(
    launched: Launched, agent: str
) -> None:
    bridged = [launched.rollouts[(agent, case)] for case in range(len(launched.cases))]
    reference = [launched.rollouts[(f"{agent}_in_process", case)] for case in range(len(launched.cases))]
    got = [float(r["reward"]) for r in bridged]
    expected = [float(r["reward"]) for r in reference]
    print(f"\n{agent}: bridge {got}, Gym in-process MCP {expected} ({launched.cases})")
    assert expected == [0.0 if kind == "control" else 1.0 for kind in launched.cases]
    assert got == expected
    for via_bridge, in_process in zip(bridged, reference, strict=True):
        for rollout in (via_bridge, in_process):  # the planned calls, by whatever prefix the CLI put on
            names = [call["name"].rsplit("__", 1)[-1] for call in function_calls(rollout)]
            assert names == ["increment_counter", "get_counter_value"], function_calls(rollout)
        assert via_bridge["_bridge"]["recorded_tool_calls"] == 2, via_bridge["_bridge"]
        assert via_bridge["_bridge"]["unresolved"] == []
        assert "_bridge" not in in_process
        if agent == "simple_agent":  # plain HTTP tool calls: the upstream's own answers, both ways
            assert tool_outputs(via_bridge) == tool_outputs(in_process)


@pytest.mark.parametrize("agent", ["claude_code_agent"])
def test_mcp_server_name_is_the_gym_instance_name(launched: Launched, agent: str) -> None:
    """Claude Code prefixes each MCP tool with the server name it was given (``mcp__<name>__<tool>``):
    the seed's ``server_name``, which for Gym's own exposure is the instance name. The bridge started
    by the launcher names itself the same way."""
    for instance, server in ((agent, BRIDGE), (f"{agent}_in_process", IN_PROCESS)):
        names = {c["name"] for c in function_calls(launched.rollouts[(instance, 0)])}
        assert names == {f"mcp__{server}__increment_counter", f"mcp__{server}__get_counter_value"}


def test_the_bridges_record_shows_every_call(launched: Launched) -> None:
    """The bridge's audit log: two calls for each bridged rollout (over plain HTTP for simple_agent,
    over MCP for the CLIs), none for the rollouts that went to Gym's in-process exposure."""
    per_agent = len(launched.cases) * 2
    transports = sorted(line["transport"] for line in launched.audit)
    assert len(launched.audit) == 3 * per_agent, launched.audit
    assert transports.count("mcp") == 2 * per_agent, transports  # Claude Code, Codex
    assert {line["outcome"] for line in launched.audit} == {"ok"}
    assert len(launched.remote_audit) == per_agent  # simple_agent_remote's, on the remote bridge


def test_observability_rollout_ids_reach_the_bridge(launched: Launched) -> None:
    """With ``observability_enabled: true`` Gym's rollout id (``<task>-<rollout>``) prefixes every
    resources-server request; the bridge keeps it in its audit log and in the signed provenance."""
    bridged = [r for (instance, _), r in launched.rollouts.items() if instance in AGENTS]
    ids = [f"{r['_ng_task_index']}-{r['_ng_rollout_index']}" for r in bridged]
    remote = [launched.rollouts[("simple_agent_remote", case)] for case in range(len(launched.cases))]
    remote_ids = [f"{r['_ng_task_index']}-{r['_ng_rollout_index']}" for r in remote]
    if not launched.observability:
        assert all("rollout_id" not in r["_bridge"]["provenance"] for r in [*bridged, *remote])
        assert all("rollout_id" not in line for line in [*launched.audit, *launched.remote_audit])
        return
    assert sorted(line.get("rollout_id", "") for line in launched.remote_audit) == sorted(remote_ids * 2)
    assert len(set(ids)) == len(bridged) == 3 * len(launched.cases)
    for rollout_id, rollout in zip(ids, bridged, strict=True):
        assert rollout["_bridge"]["provenance"]["rollout_id"] == rollout_id, rollout["_bridge"]
    assert sorted(line.get("rollout_id", "") for line in launched.audit) == sorted(ids * 2)
    # Gym's real model server was in the path: it captured the model calls of every rollout
    captured = list((launched.launcher.work / "model-calls").rglob("*"))
    assert any(path.is_file() for path in captured), captured


def launched_bridge_url(log: str) -> str:
    """The URL of the bridge the launcher started, from the line its entry prints."""
    found = re.search(rf"{BRIDGE}: starting the bridge for {BRIDGE} on (\S+):(\d+)", log)
    assert found is not None, log[-3000:]
    return f"http://{found[1]}:{found[2]}"


def test_a_session_lost_mid_run_is_a_retryable_failure_in_gyms_sidecar(launched: Launched) -> None:
    """The launched bridge's upstream is killed after a row's first tool call (the bridge starts a
    new one): Gym's collector (``+route_failures_to_sidecar=true``) puts that row in its failures
    sidecar, retryable, with the bridge's ``session_lost`` and reason in it, and not in the rollouts
    file; its resume re-runs the row, which then scores what Gym's in-process exposure scored."""
    victim = 1
    rows = [{**row, "agent_ref": {"name": "simple_agent"}} for row in launched.rows[:2]]
    expected = [float(launched.rollouts[("simple_agent_in_process", case)]["reward"]) for case in range(2)]
    assert expected == [1.0, 1.0], expected
    prompt = first_user_text(rows[victim]["responses_create_params"])
    launched.stub.armed[prompt] = restart_upstream(launched_bridge_url(launched.launcher.log()))
    one_at_a_time = "+num_samples_in_parallel=1"  # no other rollout sees the restart
    keys = ["+route_failures_to_sidecar=true", one_at_a_time]
    first = launched.launcher.collector(rows, "lost", keys)
    failed = launched.launcher.failures("lost")
    assert launched.stub.armed == {}, "the victim's rollout never reached its second model call"
    assert [(int(r["_ng_task_index"]), float(r["reward"])) for r in first] == [(0, expected[0])]
    assert len(failed) == 1 and int(failed[0]["_ng_task_index"]) == victim, failed
    failure = failed[0]
    assert "reward" not in failure and not failure.get("_ng_failure_terminal"), failure
    said = str(failure.get("_ng_failure_response_body"))
    assert "session_lost" in said and "the upstream resources server restarted" in said, said
    assert "re-run the rollout from /seed_session" in said, said

    resumed = launched.launcher.collector(rows, "lost", [*keys, "+resume_from_cache=true"])
    assert launched.launcher.failures("lost") == failed, "the resume added no failure"
    assert sorted((int(r["_ng_task_index"]), float(r["reward"])) for r in resumed) == list(
        enumerate(expected)
    )


def test_remote_bridge_watched_by_the_launcher(launched: Launched) -> None:
    """A bridge running elsewhere: the entry serves nothing, the launcher's process stays up, rows
    collect through the remote bridge, and when it goes away the launcher's output says so in one line."""
    remote = launched.remote
    rewards = [
        float(launched.rollouts[("simple_agent_remote", case)]["reward"])
        for case in range(len(launched.cases))
    ]
    assert rewards == [0.0 if kind == "control" else 1.0 for kind in launched.cases]
    assert (
        f"{BRIDGE}: {REMOTE} is the remote bridge at {remote.url}; nothing is served here"
        in launched.launcher.log()
    )
    remote.stop()
    pattern = re.compile(rf"{BRIDGE}: remote bridge {re.escape(remote.url)} unreachable: .+")
    deadline = time.monotonic() + 30
    while pattern.search(launched.launcher.log()) is None:
        assert time.monotonic() < deadline, launched.launcher.log()[-3000:]
        time.sleep(0.5)
    assert launched.launcher.proc is not None and launched.launcher.proc.poll() is None  # the launch goes on
