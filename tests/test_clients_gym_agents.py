"""nemo-gym 0.7.0's own harness agent servers drive rollouts through the bridge, as Gym users run them.

Real parts: the nemo-gym 0.7.0 environment the project builds (``make gym-env NEMO_GYM_VERSION=0.7.0``
through ``tools.gym_env.ensure_gym07_env``), the agent servers of its ``responses_api_agents/``
started from their own shipped configs the way ``gym env start`` starts a server
(``tests/interop/gym07_agents.py``), the real CLIs they drive (npm, pinned), Gym's head server, and
each row posted to the agent's ``/run`` as Gym's collection posts it (``run_rows`` says why not
through ``ng_collect_rollouts`` itself). The resources server is one of two, on the
same Gym environment (``example_session_state_mgmt``, row 0: count 3 -> 6):

* ``bridge``: the bridge in managed mode, its upstream a real nemo-gym 0.7.0 server
  (``serve --gym-python .gym-env-0.7.0/bin/python``);
* ``inproc``: the same Gym server started by Gym itself with ``expose_tools_over_mcp: true`` (Gym
  0.7.0's in-process MCP exposure, ``nemo_gym.mcp_auto_exposure``): the expected reward.

``opencode_agent`` (OpenCode 1.17.11), ``kilocode_agent`` (Kilo Code CLI 7.7.7), ``cline_agent``
(Cline 3.0.57), ``pi_agent`` (pi 0.80.2) and ``openclaw_agent`` (OpenClaw 2026.6.11), all on a stub
Chat Completions server, run the same road to show what an agent that does not pass the seed's
``mcp`` block does: the session's tools are never offered, the stub (which would call them) finds
none, and the bridge serves no tool call during the rollout (its own ``/metrics``). kilocode_agent
and cline_agent reach the stub through their shipped ``model_server: policy_model`` (a Gym model
server entry whose address is the stub); pi_agent and openclaw_agent through a provider in their
shipped ``models_config`` / ``openclaw_config`` blocks.

The model is a stub of the API each CLI speaks (Anthropic Messages with SSE for Claude Code, the
Responses API for Codex): it replays the row's solution, calling each tool by the name the CLI
advertised in that request (``tests/interop/stubs``), never by a name written here. The control is
the same row with ``CONTROL`` appended to its prompt: the stub then calls no tool, and the rollout
must score 0.0 both ways. (One agent server per CLI and resources server: every Gym 0.7 server
process costs about 16 CPU-seconds to start, so the control does not get agents of its own; one
head server and the two resources servers serve all agents.) Rows are collected one at a time so
each stub serves one rollout at a time. ``openclaw_agent`` gets no control row: one OpenClaw run
costs 28-106 s here (``onboard``, then the agent's plugin start), the file is over its CI time
share already, and its solution run already calls no tool.

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

from bridge.scoring.harness import HARNESS_TOOLS
from tests.fixtures.bridges import ROOT, BridgeProcess, free_port, gym_data, gym_servers
from tests.fixtures.harness import LocalStub, Solution, counter_solution
from tests.interop.capture_cli_tools import BINARIES, NODE22, openclaw_providers, pi_models, provider_config
from tests.interop.node import ensure_packages, installed_cli
from tests.interop.stubs.anthropic_stub import StubAnthropicMessages
from tests.interop.stubs.openai_chat_stub import ChatPlan, StubChatCompletions
from tests.test_clients_claude_code import CLAUDE_VERSION
from tests.test_clients_codex import CODEX_VERSION, StubResponsesProvider
from tests.test_clients_verifiers import tool_calls_by_transport

ENV = "example_session_state_mgmt"
SERVERS = ROOT / "tests" / "interop" / "gym07_agents.py"
WHERE = ("bridge", "inproc")
pytestmark = [
    pytest.mark.launcher,
    pytest.mark.npm,
    pytest.mark.timeout(2700),
]  # Gym 0.7 servers start slowly on a loaded 2-core machine
KINDS = ("solution", "control")


@dataclass
class Harness:
    agent: str  # the folder under responses_api_agents/
    version: str
    bin_dir: str
    stub: LocalStub  # the stub model server
    kinds: tuple[str, ...] = KINDS
    settings: dict[str, Any] | None = None  # laid over the shipped config as given (no-MCP agents)

    def config(self) -> dict[str, Any]:
        stub = self.stub
        if self.settings is not None:
            return self.settings
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
    plans: dict[str, ChatPlan]  # no-MCP agent -> its stub plan (the tool names of each model request)
    chat: StubChatCompletions
    bridge_calls: dict[tuple[str, str], dict[str, float]]  # the bridge's tool calls during the rollout


CONTROL = "(control: this run calls no tool)"
OPENCODE_MODEL = "capture"  # the stub's plan name (capture_cli_tools.provider_config's model)
# the agents whose CLI is never given the seed's mcp block: agent -> (npm set and fixture name, CLI
# version, the command the agent runs, the binary in the npm set)
NO_MCP = {
    "opencode_agent": ("opencode", "1.17.11", "opencode", BINARIES["opencode"]),
    "kilocode_agent": ("kilocode", "7.7.7", "kilo", BINARIES["kilocode"]),
    "cline_agent": ("cline", "3.0.57", "cline", BINARIES["cline"]),
    "pi_agent": ("pi", "0.80.2", "pi", BINARIES["pi"]),
    "openclaw_agent": ("openclaw", "2026.6.11", "openclaw", BINARIES["openclaw"]),
}


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


class ControlChat(StubChatCompletions):
    """Answers text, no call, when the prompt carries ``CONTROL``; otherwise replays the plan."""

    def message(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        if CONTROL in json.dumps(body.get("messages")):
            return {"role": "assistant", "content": "Done."}, "stop"
        return super().message(body)


def no_mcp_settings(agent: str, chat: StubChatCompletions, work: Path, node22: Path) -> dict[str, Any]:
    """What the test lays over a no-MCP agent's shipped config: the stub model (the agent's plan is
    named after the agent), the CLI version installed, a workspace outside Gym's install folder."""
    common = {"workspace_root": str(work / "workspaces" / agent), "timeout": 300}
    plan = agent  # the model name the CLI sends, which selects the stub's plan
    if agent in ("kilocode_agent", "cline_agent"):  # shipped model_server: policy_model (the stub)
        version_key = "kilo_version" if agent == "kilocode_agent" else "cline_version"
        return {**common, "model": plan, version_key: NO_MCP[agent][1]}
    if agent == "pi_agent":
        path = os.pathsep.join([str(node22), str(work / "bin"), os.environ.get("PATH", "")])
        return {
            **common,
            "model": f"stub/{plan}",
            "models_config": pi_models(chat.base_url, plan),
            "env": {"PATH": path},  # pi needs Node >= 22
        }
    return {
        **common,
        "model": f"stub/{plan}",
        "openclaw_config": {"models": openclaw_providers(chat.base_url, plan)},
        "node_bin_dir": str(node22),  # the agent's own setting: OpenClaw needs Node >= 22
    }


def instance(agent: str, where: str) -> str:
    return f"{agent}_{where}"


def control_row(row: dict[str, Any]) -> dict[str, Any]:
    params = dict(row["responses_create_params"])
    params["input"] = [{**m, "content": f"{m['content']} {CONTROL}"} for m in params["input"]]
    return {**row, "responses_create_params": params}


def run_rows(
    rows: list[dict[str, Any]], agents: dict[str, Any], bridge: BridgeProcess
) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """Each row posted to its agent server's ``/run``, one at a time: the request Gym's collection
    sends for a flat row (``nemo_gym/rollout_collection.py``: ``server_client.post(<agent_ref.name>,
    "/run", row)``, through the ``legacy_agent`` environment server Gym generates per agent, which
    forwards the row to the agent's ``/run``). Gym's launcher and ``ng_collect_rollouts`` themselves,
    relays and Ray included, run ``claude_code_agent``, ``codex_agent`` and ``simple_agent`` through the
    bridge in tests/test_gym_launcher.py; here every harness agent gets the same request without the
    relay, which started outside the launcher would start a Ray cluster per agent.
    Beside each rollout: the tool calls the bridge served meanwhile, by transport (its /metrics)."""
    out = []
    for row in rows:
        port = agents[row["agent_ref"]["name"]]["port"]
        before = tool_calls_by_transport(bridge)
        answer = httpx.post(f"http://127.0.0.1:{port}/run", json=row, timeout=900)
        assert answer.status_code == 200, (row["agent_ref"], answer.status_code, answer.text[-3000:])
        after = tool_calls_by_transport(bridge)
        out.append((answer.json(), {k: v - before.get(k, 0.0) for k, v in after.items()}))
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
        (work / "bin").mkdir()
        chat = stack.enter_context(ControlChat())
        plans: dict[str, ChatPlan] = {}
        for agent, (npm_set, version, command, binary) in NO_MCP.items():
            installed = ensure_packages(npm_set).path
            (work / "bin" / command).symlink_to(installed / binary)  # the command the agent runs
            if agent == "opencode_agent":
                plans[agent] = chat.add(OPENCODE_MODEL, solution)
                harnesses[agent] = Harness(agent, version, str(work / "bin"), chat, ("solution",))
                continue
            plans[agent] = chat.add(agent, solution)
            kinds = ("solution",) if agent == "openclaw_agent" else KINDS
            settings = no_mcp_settings(agent, chat, work, installed / NODE22)
            harnesses[agent] = Harness(agent, version, str(work / "bin"), chat, kinds, settings)
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
            # the Gym model server kilocode_agent's and cline_agent's shipped configs name
            "models": {"policy_model": {"host": chat.host, "port": chat.port}},
            "agents": agents,
            "path": sorted({h.bin_dir for h in harnesses.values()}),
            "home": str(work / "home"),
            "log_dir": str(work),
            "ready_file": str(work / "gym-servers.json"),
            "timeout": 1200,  # 15 Gym 0.7 server starts (~16 CPU-s each): minutes on a loaded 2-core machine
        }
        home = {**os.environ, "HOME": plan["home"]}
        with gym_servers(gym07_python, SERVERS, plan, work / "gym-servers.log", 1260, home) as global_config:
            keys = [(name, kind) for name in agents for kind in harnesses[str(agents[name]["agent"])].kinds]
            rows = [
                {**(row if kind == "solution" else control_row(row)), "agent_ref": {"name": name}}
                for name, kind in keys
            ]
            ran = run_rows(rows, agents, bridge07)
        yield Collected(
            {key: rollout for key, (rollout, _) in zip(keys, ran, strict=True)},
            global_config,
            harnesses,
            plans,
            chat,
            {key: calls for key, (_, calls) in zip(keys, ran, strict=True)},
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


@pytest.mark.parametrize("agent", list(NO_MCP))
def test_gym_agent_without_the_mcp_block_never_offers_the_session_tools(
    collected: Collected, agent: str
) -> None:
    """nemo-gym 0.7.0's agent does not read the seed's ``mcp`` block: its CLI is never told about the
    session's tools, so the stub (which would call them) finds none offered, the CLI never reaches
    the bridge's MCP endpoint, and the row scores what a rollout without tool calls scores, both
    ways. What the CLI offered instead is its own tools, as captured in the harness-tool fixture."""
    client = NO_MCP[agent][0]
    kinds = collected.harnesses[agent].kinds
    rollouts = {(w, k): collected.rollouts[(instance(agent, w), k)] for w in WHERE for k in kinds}
    plan = collected.plans[agent]
    offered = {name for names in plan.offered for name in names}
    print(
        f"\n{agent}: { {key: r['reward'] for key, r in rollouts.items()} }; {len(plan.requests)} model requests,"
    )
    print(
        f"offered {sorted(offered)}; bridge calls { {k: c for k, c in collected.bridge_calls.items() if agent in k[0]} }"
    )
    assert plan.offered, f"{agent}: its CLI made no model request"
    assert not {n for n in offered if n.endswith(("increment_counter", "get_counter_value"))}, offered
    assert offered and offered <= HARNESS_TOOLS[client], offered - HARNESS_TOOLS[client]  # its own tools only
    # the stub asked for the row's first tool in every solution run and found it not offered
    tried = [
        u
        for u in collected.chat.unknown
        if u.startswith(f"{plan_name(agent)}: 'increment_counter' not offered")
    ]
    assert len(tried) >= len(WHERE), collected.chat.unknown
    assert plan.emitted == []
    for (where, kind), rollout in rollouts.items():
        assert rollout["reward"] == 0.0, (where, kind, rollout)
        assert [o for o in rollout["response"]["output"] if o["type"] == "function_call"] == [], rollout
        # the agent server reached the bridge (seed and verify: the _bridge report), its CLI never did
        if where == "bridge":
            assert rollout["_bridge"]["recorded_tool_calls"] == 0
            assert set(collected.bridge_calls[(instance(agent, where), kind)].values()) <= {0.0}


def plan_name(agent: str) -> str:
    return OPENCODE_MODEL if agent == "opencode_agent" else agent
