"""nemo-gym 0.7.0's own harness agent servers drive rollouts through the bridge, as Gym users run them.

Real parts: the nemo-gym 0.7.0 environment the project builds (``make gym-env NEMO_GYM_VERSION=0.7.0``
through ``benchmarks.procs.ensure_gym07_env``), the agent servers of its ``responses_api_agents/``
started from their own shipped configs the way ``gym env start`` starts a server
(``tests/interop/gym07_agents.py``), the real CLIs they drive (npm, pinned), Gym's head server, and
each row posted to the agent's ``/run`` as Gym's collection posts it (``run_rows`` says why not
through ``ng_collect_rollouts`` itself). The resources server is one of two, on the
same Gym environment (``example_session_state_mgmt``, row 0: count 3 -> 6):

* ``bridge``: the bridge in managed mode, its upstream a real nemo-gym 0.7.0 server
  (``serve --gym-python .gym-env-0.7.0/bin/python``);
* ``inproc``: the same Gym server started by Gym itself with ``expose_tools_over_mcp: true`` (Gym
  0.7.0's in-process MCP exposure, ``nemo_gym.mcp_auto_exposure``): the expected reward.

``opencode_agent`` (OpenCode 1.17.11, stub Chat Completions) runs the same road to show what an
agent that does not pass the seed's ``mcp`` block does: the session's tools are never offered.

The model is a stub of the API each CLI speaks (Anthropic Messages with SSE for Claude Code, the
Responses API for Codex): it replays the row's solution, calling each tool by the name the CLI
advertised in that request (``tests/interop/stubs``), never by a name written here. The control is
the same row with ``CONTROL`` appended to its prompt: the stub then calls no tool, and the rollout
must score 0.0 both ways. (One agent server per CLI and resources server: every Gym 0.7 server
process costs about 16 CPU-seconds to start, so the control does not get agents of its own.) Rows
are collected one at a time so each stub serves one rollout at a time.

Not here: Gym 0.7's ``observability_enabled: true`` (every resources-server request under
``/ng-rollout/<id>/``) is checked with Gym 0.7's own ServerClient in tests/test_gym07.py; these
agents were not re-run with it (each extra Gym 0.7 server start costs ~16 CPU-seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, BridgeProcess, free_port, gym_data, gym_servers
from tests.interop.capture_cli_tools import BINARIES, provider_config
from tests.interop.node import ensure_packages, installed_cli
from tests.interop.stubs.anthropic_stub import StubAnthropicMessages
from tests.interop.stubs.common import LocalStub, Solution, counter_solution
from tests.interop.stubs.openai_chat_stub import StubChatCompletions
from tests.test_clients_claude_code import CLAUDE_VERSION
from tests.test_clients_codex import CODEX_VERSION, StubResponsesProvider

ENV = "example_session_state_mgmt"
SERVERS = ROOT / "tests" / "interop" / "gym07_agents.py"
WHERE = ("bridge", "inproc")
pytestmark = pytest.mark.timeout(1800)  # Gym 0.7 servers start slowly on a loaded 2-core machine
KINDS = ("solution", "control")


@dataclass
class Harness:
    agent: str  # the folder under responses_api_agents/
    version: str
    bin_dir: str
    stub: LocalStub  # the stub model server
    kinds: tuple[str, ...] = KINDS

    def config(self) -> dict[str, Any]:
        stub = self.stub
        if self.agent == "opencode_agent":
            return {
                "model": f"stub/{OPENCODE_MODEL}",
                "opencode_config": provider_config(f"{stub.root_url}/v1"),
            }
        if self.agent == "claude_code_agent":
            return {
                "anthropic_api_key": "stub-key",
                "anthropic_base_url": stub.root_url,
                "claude_code_version": self.version,
                "timeout": 240,
                "max_turns": 8,
            }
        return {
            "openai_api_key": "stub-key",
            "openai_base_url": f"{stub.root_url}/v1",
            "model": "gym-stub-model",
            "codex_version": self.version,
            "timeout": 240,
        }


@dataclass
class Collected:
    rollouts: dict[tuple[str, str], dict[str, Any]]  # (agent instance, kind) -> its rollout
    global_config: dict[str, Any]
    harnesses: dict[str, Harness]
    opencode_offered: list[list[str]]  # the tool names OpenCode sent in each model request


CONTROL = "(control: this run calls no tool)"
OPENCODE_MODEL = "capture"  # the stub's plan name (capture_cli_tools.provider_config's model)
OPENCODE_BINARY = BINARIES["opencode"]


class ControlAnthropic(StubAnthropicMessages):
    """Replays the solution, or nothing when the prompt carries ``CONTROL`` (rollouts run one at a time)."""

    def __init__(self, solution: Solution) -> None:
        self.full = solution
        super().__init__(solution)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.solution = [] if CONTROL in json.dumps(body.get("messages")) else self.full
        return super().answer(body)


class ControlResponses(StubResponsesProvider):
    """Replays the solution, or nothing when the prompt carries ``CONTROL`` (rollouts run one at a time)."""

    def __init__(self, solution: Solution) -> None:
        self.full = solution
        super().__init__(solution)

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self.solution = [] if CONTROL in json.dumps(body.get("input")) else self.full
        return super().answer(body)


def instance(agent: str, where: str) -> str:
    return f"{agent}_{where}"


def control_row(row: dict[str, Any]) -> dict[str, Any]:
    params = dict(row["responses_create_params"])
    params["input"] = [{**m, "content": f"{m['content']} {CONTROL}"} for m in params["input"]]
    return {**row, "responses_create_params": params}


def run_rows(rows: list[dict[str, Any]], agents: dict[str, Any]) -> list[dict[str, Any]]:
    """Each row posted to its agent server's ``/run``, one at a time: the request Gym's collection
    sends for a flat row (``nemo_gym/rollout_collection.py``: ``server_client.post(<agent_ref.name>,
    "/run", row)``). ``ng_collect_rollouts`` itself is not run here: on this machine nemo-gym 0.7.0's
    collection sat idle for over ten minutes without opening a connection to any agent (the same
    rows answered from ``/run`` in seconds), which was not diagnosed in time; see docs/clients.md."""
    out = []
    for row in rows:
        port = agents[row["agent_ref"]["name"]]["port"]
        answer = httpx.post(f"http://127.0.0.1:{port}/run", json=row, timeout=600)
        assert answer.status_code == 200, (row["agent_ref"], answer.status_code, answer.text[-3000:])
        out.append(answer.json())
    return out


@pytest.fixture(scope="module")
def bridge07(gym07_python: Path, log_dir: Path) -> Iterator[BridgeProcess]:
    """The bridge in managed mode on a nemo-gym 0.7.0 upstream."""
    bridge = BridgeProcess(args=["--gym-python", str(gym07_python), "--resources-server", ENV])
    bridge.start(log_dir, timeout=300)
    yield bridge
    bridge.stop()


@pytest.fixture(scope="module")
def collected(
    bridge07: BridgeProcess, gym07_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Collected]:
    row = gym_data(ENV)[0]  # 3 -> 6
    solution = counter_solution(row)
    claude = installed_cli("claude-code", "claude", f"{CLAUDE_VERSION} (Claude Code)")
    codex = installed_cli("codex", "codex", f"codex-cli {CODEX_VERSION}")
    work = tmp_path_factory.mktemp("gym07-agents")
    (work / "home").mkdir()
    with contextlib.ExitStack() as stack:
        harnesses = {
            "claude_code_agent": Harness(
                "claude_code_agent",
                CLAUDE_VERSION,
                str(Path(claude).parent),
                stack.enter_context(ControlAnthropic(solution)),
            ),
            "codex_agent": Harness(
                "codex_agent",
                CODEX_VERSION,
                str(Path(codex).parent),
                stack.enter_context(ControlResponses(solution)),
            ),
        }
        opencode = ensure_packages("opencode").path / OPENCODE_BINARY
        (work / "bin").mkdir()
        (work / "bin" / "opencode").symlink_to(opencode)  # the command name opencode_agent runs
        chat = stack.enter_context(StubChatCompletions())
        opencode_plan = chat.add(OPENCODE_MODEL, solution)
        harnesses["opencode_agent"] = Harness(
            "opencode_agent", "1.17.11", str(work / "bin"), chat, ("solution",)
        )
        agents = {
            instance(name, where): {
                "agent": name,
                "resources": where,
                "port": free_port(),
                "config": harness.config(),
            }
            for name, harness in harnesses.items()
            for where in WHERE
        }
        plan = {
            "head": {"host": "127.0.0.1", "port": free_port()},
            "resources": {
                "bridge": {"env": ENV, "host": bridge07.host, "port": bridge07.port, "serve": False},
                "inproc": {"env": ENV, "host": "127.0.0.1", "port": free_port(), "serve": True},
            },
            "agents": agents,
            "path": sorted({h.bin_dir for h in harnesses.values()}),
            "home": str(work / "home"),
            "log_dir": str(work),
            "ready_file": str(work / "gym-servers.json"),
        }
        home = {**os.environ, "HOME": plan["home"]}
        with gym_servers(gym07_python, SERVERS, plan, work / "gym-servers.log", 660, home) as global_config:
            keys = [(name, kind) for name in agents for kind in harnesses[str(agents[name]["agent"])].kinds]
            rows = [
                {**(row if kind == "solution" else control_row(row)), "agent_ref": {"name": name}}
                for name, kind in keys
            ]
            rollouts = run_rows(rows, agents)
        yield Collected(
            dict(zip(keys, rollouts, strict=True)), global_config, harnesses, opencode_plan.offered
        )


@pytest.mark.parametrize("agent", ["claude_code_agent", "codex_agent"])
def test_gym_agent_through_the_bridge_scores_as_gym_in_process(collected: Collected, agent: str) -> None:
    rollouts = {(w, k): collected.rollouts[(instance(agent, w), k)] for w in WHERE for k in KINDS}
    rewards = {key: r["reward"] for key, r in rollouts.items()}
    print(f"\n{agent}: {rewards}")
    assert rewards[("inproc", "solution")] == 1.0, rollouts[("inproc", "solution")]
    assert rewards[("bridge", "solution")] == rewards[("inproc", "solution")], rollouts[
        ("bridge", "solution")
    ]
    assert rewards[("bridge", "control")] == rewards[("inproc", "control")] == 0.0

    # the calls reached the seeded session: the CLI's own get_counter_value, over MCP, read 6 (3 + 3)
    # in both, and the bridge recorded both calls in the session it seeded for this rollout
    for where in WHERE:
        outputs = [
            o["output"]
            for o in rollouts[(where, "solution")]["response"]["output"]
            if o["type"] == "function_call_output"
        ]
        assert len(outputs) == 2 and '"count": 6' in outputs[-1].replace('":6', '": 6'), (where, outputs)
    assert rollouts[("bridge", "solution")]["_bridge"]["recorded_tool_calls"] == 2
    assert rollouts[("bridge", "solution")]["_bridge"]["unresolved"] == []
    assert rollouts[("bridge", "control")]["_bridge"]["recorded_tool_calls"] == 0
    calls = [o for o in rollouts[("bridge", "control")]["response"]["output"] if o["type"] == "function_call"]
    assert calls == []


def test_opencode_agent_never_offers_the_session_tools(collected: Collected) -> None:
    """nemo-gym 0.7.0's opencode_agent does not read the seed's ``mcp`` block: OpenCode is never told
    about the session's tools, so the stub (which would call them) finds none offered, no call
    reaches the session, and the row scores what a rollout without tool calls scores, both ways."""
    rollouts = {w: collected.rollouts[(instance("opencode_agent", w), "solution")] for w in WHERE}
    print(f"\nopencode_agent: { {w: r['reward'] for w, r in rollouts.items()} }")
    assert collected.opencode_offered, "OpenCode made no model request"
    offered = {name for names in collected.opencode_offered for name in names}
    assert not {n for n in offered if n.endswith(("increment_counter", "get_counter_value"))}, offered
    assert "bash" in offered  # its own tools only
    assert rollouts["bridge"]["reward"] == rollouts["inproc"]["reward"] == 0.0
    assert rollouts["bridge"]["_bridge"]["recorded_tool_calls"] == 0
