"""Codex's built-in web search against a session tool that is also called ``web_search``, end to end:
a real bridge in front of a real nemo-gym 0.7.0 server, the session's tool called over MCP with the
SDK client, and the rollout as Gym's ``codex_agent`` writes it (``tests/fixtures/gym07/codex_transcript.py``
runs the wheel's own ``CodexAgent._create_response`` on ``codex exec --json`` events).

Gym's converter writes Codex's MCP call of the session's ``web_search`` and Codex's own built-in web
search the same way: a bare ``web_search`` function call with ``{"query": ...}``. Only the
session's log can tell them apart. Every expected reward below is the Gym server's own answer to the
same body sent to it directly, without the bridge.

* ``tavily_search``, Gym's environment with the session tool ``web_search``, unmodified, in its own
  environment (``tavily-python``), configured as Gym's own unit tests configure it
  (``tests/fixtures/gym07/tavily_offline.py``): its tool answers a query over 400 characters
  offline ("Query is too long"), and its verify (regex mode: no judge) reads the final answer only.
  With the call served the bridge's answer is Gym's; without it the call is not credited
  (``_bridge.harness_tools``), and Gym's reward is the same either way: this environment's reward
  never depends on which tool was called.
* ``tests/fixtures/gym07/search_step.py``: Gym's ``terminal_multi_harness`` verifier, which scores
  the next action by tool name, with an offline ``web_search`` session tool (no installed Gym
  environment with that tool scores the call: see the fixture). There the credit decides
  the reward: served, the bridge gives Gym's 1.0; not served (Codex's own search), Gym alone would
  give 1.0 to the env's tool, and the bridge gives what Gym gives a rollout that made no call.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.upstream import envs
from tests.fixtures.bridges import HEADER, BridgeProcess, mcp_client, upstream_url

pytestmark = pytest.mark.anyio
GYM07_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gym07"
NOT_CREDITED = "also a tool of this session; no call the session served proves it"
CLIENTS = ["gym-codex-agent", "openclaw"]  # whose own tools include web_search (harness table)


def own_env(gym_python: Path, env: str) -> Path:
    """The interpreter Gym's runner gives the bundled ``env`` (its own requirements layered on
    ``gym_python``), built by the bridge's builder into its cache. The env's directory comes from the
    interpreter's site-packages, not from ``resources_servers`` as imported from the working directory."""
    base = asyncio.run(envs.query_base(gym_python))
    lines = envs.requirement_lines(base.purelib / "resources_servers" / env)
    target = envs.env_dir(envs.DEFAULT_CACHE, env, lines, base, gym_python)
    asyncio.run(envs.build(target, env, lines, base, gym_python))
    return target / "bin" / "python"


def codex_response(gym07_python: Path, events: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any]:
    """What Gym's codex_agent sends to /verify for a Codex run that printed ``events``."""
    done = subprocess.run(
        [str(gym07_python), str(GYM07_FIXTURES / "codex_transcript.py")],
        input=json.dumps({"events": events, "responses_create_params": row["responses_create_params"]}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def completed(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "item.completed", "item": item}


def mcp_search(server: str, query: str, answer: str) -> dict[str, Any]:
    """Codex's MCP call of the session's web_search (``codex exec --json``'s mcp_tool_call item)."""
    result = {"content": [{"type": "text", "text": answer}]}
    return completed(
        {
            "id": "item_0",
            "type": "mcp_tool_call",
            "server": server,
            "tool": "web_search",
            "arguments": {"query": query},
            "result": result,
            "error": None,
            "status": "completed",
        }
    )


def builtin_search(query: str) -> dict[str, Any]:
    """Codex's own web search (its web_search item): no MCP server was asked."""
    return completed({"id": "item_0", "type": "web_search", "query": query})


def finish(text: str) -> list[dict[str, Any]]:
    usage = {"input_tokens": 120, "output_tokens": 30, "cached_input_tokens": 0}
    return [
        completed({"id": "item_1", "type": "agent_message", "text": text}),
        {"type": "turn.completed", "usage": usage},
    ]


async def seed_and_call(
    bridge: BridgeProcess, row: dict[str, Any], query: str | None
) -> tuple[str, str, str]:
    """Seed ``row`` through the bridge and, unless ``query`` is None, call the session's web_search over
    MCP; (token, server name, the tool's answer)."""
    metadata = dict(bridge.seed(row)["mcp"])
    token = metadata["headers"][HEADER]
    answer = ""
    if query is not None:
        async with mcp_client(f"{bridge.url}/mcp", token) as client:
            result = await client.call_tool("web_search", {"query": query})
        assert not result.is_error, result.content
        answer = json.loads(result.content[0].text)["results_string"]
    return token, metadata["server_name"], answer


def through_bridge(bridge: BridgeProcess, token: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{bridge.url}/verify", json=body, headers={HEADER: token}, timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def natively(
    bridge: BridgeProcess, row: dict[str, Any], body: dict[str, Any], query: str | None
) -> dict[str, Any]:
    """The Gym server's own answer to ``body``, no bridge: seeded, ``web_search`` called when
    ``query`` is given, verified, all in one session of its own."""
    with httpx.Client(base_url=upstream_url(bridge.url), timeout=120) as gym:
        gym.post("/seed_session", json=row).raise_for_status()
        if query is not None:
            gym.post("/web_search", json={"query": query}).raise_for_status()
        verified = gym.post("/verify", json=body)
        verified.raise_for_status()
        return dict(verified.json())


def without_bridge_report(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in payload.items() if key != "_bridge"}


# --------------------------------------------------------------------------------------------
# tavily_search: a real Gym environment whose session tool is web_search
# --------------------------------------------------------------------------------------------

TAVILY_ROW_INDEX = 0


def fixture_bridge(gym07_python: Path, log_dir: Path, environment: str, server: str) -> BridgeProcess:
    """A bridge in front of ``server`` (a module of tests/fixtures/gym07) run in ``environment``'s own venv."""
    python = own_env(gym07_python, environment)
    path = os.pathsep.join(p for p in (str(GYM07_FIXTURES), os.environ.get("PYTHONPATH", "")) if p)
    args = ["--gym-python", str(python), "--resources-server", server]
    return BridgeProcess(args=args, env={"PYTHONPATH": path}).start(log_dir, timeout=300)


@pytest.fixture(scope="module")
def tavily_bridge(gym07_python: Path, log_dir: Path) -> Iterator[BridgeProcess]:
    bridge = fixture_bridge(gym07_python, log_dir, "tavily_search", "tavily_offline:TavilyOfflineServer")
    yield bridge
    bridge.stop()


def tavily_row(gym07_python: Path) -> dict[str, Any]:
    path = next((gym07_python.parent.parent / "lib").glob("python3.*/site-packages/resources_servers"))
    lines = (path / "tavily_search" / "data" / "example.jsonl").read_text().splitlines()
    return dict(json.loads(lines[TAVILY_ROW_INDEX]))


def long_query(row: dict[str, Any]) -> str:
    """A query the real tool answers offline: over its 400-character limit."""
    query = f"{row['question']} (which team, which game, which language; sources please) " * 4
    assert len(query) > 400
    return query


async def test_tavily_search_a_served_web_search_scores_as_natively(
    tavily_bridge: BridgeProcess, gym07_python: Path
) -> None:
    row = tavily_row(gym07_python)
    query = long_query(row)
    token, server, answer = await seed_and_call(tavily_bridge, row, query)
    assert answer == "Query is too long"  # Gym's own tool answered
    final = f"Answer: {row['ground_truth']}\nConfidence: 80%"
    response = codex_response(gym07_python, [mcp_search(server, query, answer), *finish(final)], row)
    assert [i["name"] for i in response["output"] if i["type"] == "function_call"] == ["web_search"]
    body = {**row, "response": response}

    native = natively(tavily_bridge, row, body, query)
    assert native["reward"] == 1.0 and native["num_tool_calls"] == 1
    verdict = through_bridge(tavily_bridge, token, body)
    assert without_bridge_report(verdict) == native
    assert verdict["_bridge"]["harness_tools"] == [] and verdict["_bridge"]["unresolved"] == []
    assert verdict["_bridge"]["recorded_tool_calls"] == 1


async def test_tavily_search_codexs_own_search_is_not_credited_and_gym_never_reads_the_name(
    tavily_bridge: BridgeProcess, gym07_python: Path
) -> None:
    row = tavily_row(gym07_python)
    query = long_query(row)
    token, _, _ = await seed_and_call(tavily_bridge, row, None)  # the bridge served no call
    final = f"Answer: {row['ground_truth']}\nConfidence: 80%"
    body = {**row, "response": codex_response(gym07_python, [builtin_search(query), *finish(final)], row)}

    verdict = through_bridge(tavily_bridge, token, body)
    assert verdict["_bridge"]["harness_tools"] == [
        {"name": "web_search", "clients": CLIENTS, "reason": NOT_CREDITED}
    ]
    assert verdict["response"]["output"][0]["name"] == "web_search"  # the caller's name comes back
    # tavily_search's verify reads the final answer and counts function calls of any name: Gym's
    # own answer to this body is the same whether the call is credited or not
    native = natively(tavily_bridge, row, body, None)
    assert native["reward"] == 1.0 and native["num_tool_calls"] == 1
    assert without_bridge_report(verdict) == native


# --------------------------------------------------------------------------------------------
# Gym's terminal_multi_harness verifier: a web_search call decides the reward
# --------------------------------------------------------------------------------------------

STEP_QUERY = "nemo gym mcp bridge"
STEP_ROW: dict[str, Any] = {
    "responses_create_params": {
        "input": [{"role": "user", "content": "Search the web for the NeMo Gym MCP bridge."}],
        "tools": [
            {
                "type": "function",
                "name": "web_search",
                "description": "Search the web.",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}},
                    "required": ["query"],
                },
                "strict": False,
            }
        ],
    },
    "harness": "codex",
    "expected_action": {
        "type": "function_call",
        "name": "web_search",
        "arguments": json.dumps({"query": STEP_QUERY}),
    },
}


@pytest.fixture(scope="module")
def step_bridge(gym07_python: Path, log_dir: Path) -> Iterator[BridgeProcess]:
    bridge = fixture_bridge(gym07_python, log_dir, "terminal_multi_harness", "search_step:SearchStepServer")
    yield bridge
    bridge.stop()


async def test_a_served_web_search_scores_as_natively_where_the_name_decides(
    step_bridge: BridgeProcess, gym07_python: Path
) -> None:
    token, server, answer = await seed_and_call(step_bridge, STEP_ROW, STEP_QUERY)
    events = [mcp_search(server, STEP_QUERY, answer), *finish("Searched.")]
    body = {**STEP_ROW, "response": codex_response(gym07_python, events, STEP_ROW)}

    native = natively(step_bridge, STEP_ROW, body, STEP_QUERY)
    assert (
        native["reward"] == 1.0
        and native["category"] == "A tool call that matches the expected tool call was found"
    )
    verdict = through_bridge(step_bridge, token, body)
    assert without_bridge_report(verdict) == native
    assert verdict["_bridge"]["harness_tools"] == [] and verdict["_bridge"]["unresolved"] == []


@pytest.mark.parametrize("served", [None, "another query"], ids=["no-call-served", "other-arguments"])
async def test_codexs_own_web_search_is_not_credited_as_the_session_tool(
    step_bridge: BridgeProcess, gym07_python: Path, served: str | None
) -> None:
    token, _, _ = await seed_and_call(step_bridge, STEP_ROW, served)
    events = [builtin_search(STEP_QUERY), *finish("Searched.")]
    body = {**STEP_ROW, "response": codex_response(gym07_python, events, STEP_ROW)}

    # Gym alone cannot tell Codex's own search from its tool: it scores it as the expected call
    credited_by_gym = natively(step_bridge, STEP_ROW, body, served)
    assert credited_by_gym["reward"] == 1.0
    # what Gym gives the same rollout without that call: the reward of a rollout that never called
    # the session's tool
    no_call = codex_response(gym07_python, finish("Searched."), STEP_ROW)
    expected = natively(step_bridge, STEP_ROW, {**STEP_ROW, "response": no_call}, served)["reward"]

    verdict = through_bridge(step_bridge, token, body)
    assert verdict["reward"] == expected == 0.0
    assert verdict["reward"] != credited_by_gym["reward"]
    assert verdict["_bridge"]["harness_tools"] == [
        {"name": "web_search", "clients": CLIENTS, "reason": NOT_CREDITED}
    ]
    echoed = [i for i in verdict["response"]["output"] if i["type"] == "function_call"]
    assert [(i["name"], i["arguments"]) for i in echoed] == [
        ("web_search", json.dumps({"query": STEP_QUERY}))
    ]
