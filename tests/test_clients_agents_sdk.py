"""The OpenAI Agents SDK (``openai-agents``, pinned in the dev group) running whole rollouts
through the bridge: its real ``Runner`` loop, its own ``MCPServerStreamableHttp``, and a stub
``Model``.

The code that connects is the snippet ``gym-mcp-bridge client-config --client agents-sdk``
prints, executed as printed; the test only gives its ``Agent`` a model (``StubModel``: it answers
each turn with the next call solving the row, read from the row itself, addressed to the
``FunctionTool`` the SDK offered for that MCP tool) and the ``mcp_config`` under test (bare
names, or ``include_server_in_tool_names``, where the SDK hashes names past 64 characters), and
keeps the ``RunResult``. ``result.to_input_list()`` (Responses input items, the names as the SDK
emitted them) becomes the ``response`` given to ``/verify``. Its reward must equal the native
one for the same calls on the same Gym server; a stub solving another row scores 0.0.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunResult, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from tests.fixtures.bridges import HEADER, ROOT, BridgeProcess, gym_data, upstream_url
from tests.fixtures.harness import (
    Solution,
    counter_solution,
    ground_truth_solution,
    native_reward,
    record_names,
    verify,
)
from tests.test_clients_codex import run_codex

pytestmark = pytest.mark.anyio
AGENTS_VERSION = "0.24.0"


class StubModel(Model):
    """A stub ``Model`` (not a policy): replays ``solution``, one call per turn, then says Done.

    The SDK's name for an MCP tool is bare, ``mcp_<server>__<tool>``, or (past 64 characters)
    cut and hashed, so the stub finds the offered ``FunctionTool`` by name or suffix and, for a
    hashed name, by the tool's description (``descriptions``: the row's or server's own)."""

    def __init__(self, solution: Solution, descriptions: dict[str, str]) -> None:
        self.solution = solution
        self.descriptions = descriptions
        self.offered: list[str] | None = None
        self.emitted: list[str] = []

    def _name_for(self, tool: str, tools: list[FunctionTool]) -> str:
        for match in (
            lambda t: t.name == tool,
            lambda t: t.name.endswith(f"__{tool}"),
            lambda t: tool in self.descriptions and t.description == self.descriptions[tool],
        ):
            found = [t.name for t in tools if match(t)]
            if len(found) == 1:
                return found[0]
        raise AssertionError(f"stub: no single offered tool for {tool!r}: {[t.name for t in tools]}")

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        given = kwargs["input"] if "input" in kwargs else args[1]
        tools = [
            t for t in (kwargs["tools"] if "tools" in kwargs else args[3]) if isinstance(t, FunctionTool)
        ]
        if self.offered is None:
            self.offered = [t.name for t in tools]
        step = sum(1 for i in given if isinstance(i, dict) and i.get("type") == "function_call_output")
        output: list[Any]
        if step < len(self.solution):
            tool, arguments = self.solution[step]
            name = self._name_for(tool, tools)
            self.emitted.append(name)
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{step}",
                    call_id=f"call_{step}",
                    name=name,
                    arguments=json.dumps(arguments),
                )
            ]
        else:
            text = ResponseOutputText(type="output_text", text="Done.", annotations=[])
            output = [
                ResponseOutputMessage(
                    id="msg", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(
            output=output, usage=Usage(requests=1, input_tokens=100, output_tokens=10), response_id=None
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the rollout runs Runner.run")


@pytest.fixture(scope="module")
def sdk_version() -> Iterator[str]:
    version = importlib.metadata.version("openai-agents")
    assert version == AGENTS_VERSION
    set_tracing_disabled(True)
    yield version


def printed_snippet(bridge_url: str, row: dict[str, Any]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "bridge", "client-config", "--client", "agents-sdk",
         "--bridge-url", bridge_url, "--row-json", json.dumps(row)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


async def run_snippet(
    snippet: str, model: StubModel, include_server: bool, prompt: str
) -> tuple[RunResult, dict[str, Any]]:
    """Run the printed snippet's ``rollout(prompt)``: its own ``MCPServerStreamableHttp`` and
    ``Runner``; ``Agent`` gets the stub model and ``mcp_config``; the ``RunResult`` is kept."""
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "<client-config --client agents-sdk>", "exec"), namespace)
    runner = namespace["Runner"]
    kept: list[RunResult] = []

    class KeepingRunner:
        @staticmethod
        async def run(*args: Any, **kwargs: Any) -> RunResult:
            result = await runner.run(*args, **kwargs)
            kept.append(result)
            return result

    namespace["Agent"] = functools.partial(
        Agent, model=model, mcp_config={"include_server_in_tool_names": include_server}
    )
    namespace["Runner"] = KeepingRunner
    started = time.monotonic()
    await namespace["rollout"](prompt)
    print(f"\nagents-sdk rollout (include_server={include_server}): {time.monotonic() - started:.1f}s")
    return kept[0], namespace


def output_text(output: Any) -> str:
    """A ``function_call_output``'s text (0.24.0 gives MCP results as ``input_text`` parts)."""
    if isinstance(output, str):
        return output
    return "".join(part["text"] for part in output if part.get("type") == "input_text")


def token_of(snippet: str) -> str:
    line = next(line for line in snippet.splitlines() if "params=" in line)
    params = ast.literal_eval(line.split("params=", 1)[1].rstrip(","))  # printed with repr()
    return str(params["headers"][HEADER])


def as_response(result: RunResult) -> dict[str, Any]:
    """``result.to_input_list()`` as a Responses object: everything after the user's input.

    One conversion is needed: the SDK gives an MCP result as a list of ``input_text`` parts, and
    Gym 0.4.0's ``/verify`` accepts only a string ``function_call_output.output`` (a list is
    refused with 422), so the parts are joined."""
    output = []
    for item in result.to_input_list():
        if item.get("role") == "user" and item.get("type", "message") == "message":
            continue  # the prompt
        if item.get("type") == "function_call_output":
            item = {**item, "output": output_text(item["output"])}
        output.append(item)
    return {
        "id": "resp_agents_sdk", "object": "response", "created_at": 0, "model": "stub-model",
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }  # fmt: skip


def names_note(include: bool) -> str:
    return f"mcp_config={{'include_server_in_tool_names': {include}}}; snippet of client-config --client agents-sdk"


NAMES = {  # the header of the names fixture this test writes (``record_names``)
    "version": AGENTS_VERSION,
    "command": (
        "tests/test_clients_agents_sdk.py (merged with tests/interop/capture_agents_names.py's "
        "cases): Runner.run of the client-config agents-sdk snippet with a stub Model; 'emitted' = "
        "the FunctionTool name the SDK offered and the stub called"
    ),
    "source": f"PyPI openai-agents=={AGENTS_VERSION} (pyproject.toml dev group, uv.lock)",
}


# -- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("include_server", [False, True], ids=["bare", "include_server"])
async def test_agents_sdk_counter_rollout_scores_like_native(
    sdk_version: str, counter_bridge: BridgeProcess, include_server: bool
) -> None:
    row = gym_data("example_session_state_mgmt")[0]  # 3 -> 6
    solution = counter_solution(row)
    snippet = printed_snippet(counter_bridge.url, row)
    model = StubModel(solution, {})
    result, _ = await run_snippet(snippet, model, include_server, run_codex.user_prompt(row))
    server = "example_session_state_mgmt"
    prefix = f"mcp_{server}__" if include_server else ""
    assert model.emitted == [f"{prefix}increment_counter", f"{prefix}get_counter_value"]
    assert str(result.final_output) == "Done."
    outputs = [i["output"] for i in result.to_input_list() if i.get("type") == "function_call_output"]
    assert [json.loads(output_text(o)) for o in outputs] == [{"success": True}, {"count": 6}]

    token = token_of(snippet)
    bridged = verify(counter_bridge.url, token, {"response": as_response(result)})
    recorded = verify(counter_bridge.url, token, {"trajectory": {"format": "recorded"}})
    native = native_reward(upstream_url(counter_bridge.url), row, solution)
    assert bridged["reward"] == recorded["reward"] == native == 1.0
    expected = {f"{prefix}{t}": t for t, _ in solution} if include_server else {}
    assert bridged["_bridge"]["normalized"] == expected
    assert bridged["_bridge"]["unresolved"] == []
    tools = ["increment_counter", "get_counter_value"]
    called = [tool for tool, _ in solution]
    record_names("openai-agents", NAMES, server, tools, model.emitted, called, names_note(include_server))


async def test_agents_sdk_solving_another_row_scores_zero(
    sdk_version: str, counter_bridge: BridgeProcess
) -> None:
    rows = gym_data("example_session_state_mgmt")
    row, other = rows[0], rows[1]
    solution = counter_solution(other)  # 3 + 9 = 12, row 0 expects 6
    snippet = printed_snippet(counter_bridge.url, row)
    model = StubModel(solution, {})
    result, _ = await run_snippet(snippet, model, True, run_codex.user_prompt(row))
    token = token_of(snippet)
    bridged = verify(counter_bridge.url, token, {"response": as_response(result)})
    recorded = verify(counter_bridge.url, token, {"trajectory": {"format": "recorded"}})
    native = native_reward(upstream_url(counter_bridge.url), row, solution)
    assert bridged["reward"] == recorded["reward"] == native == 0.0
    assert bridged["_bridge"]["unresolved"] == []


@pytest.mark.parametrize("include_server", [False, True], ids=["bare", "include_server"])
@pytest.mark.parametrize("index", [0, 2], ids=["row0", "row2"])
async def test_agents_sdk_workplace_assistant_scores_like_native(
    sdk_version: str, workplace_bridge: BridgeProcess, include_server: bool, index: int
) -> None:
    """Row 2 calls ``customer_relationship_manager_update_customer``: with the server in the
    name that is 70 characters, so the SDK cuts and hashes it (``..._<8 hex>``) and the bridge
    must recompute the hash from the seeded server name."""
    rows = gym_data("workplace_assistant")
    row, other = rows[index], rows[1 if index != 1 else 0]
    solution = ground_truth_solution(row)
    descriptions = {t["name"]: t.get("description", "") for t in row["responses_create_params"]["tools"]}
    snippet = printed_snippet(workplace_bridge.url, row)
    model = StubModel(solution, descriptions)
    result, _ = await run_snippet(snippet, model, include_server, run_codex.user_prompt(row))
    server = "workplace_assistant"
    if include_server:
        assert all(name.startswith(f"mcp_{server}__") for name in model.emitted)
        if index == 2:
            hashed = r"mcp_workplace_assistant__customer_relationship_manager_[0-9a-f]{8}"
            assert all(re.fullmatch(hashed, n) for n in model.emitted), model.emitted
    else:
        assert model.emitted == [t for t, _ in solution]

    token = token_of(snippet)
    response = as_response(result)
    bridged = verify(workplace_bridge.url, token, {"response": response})
    recorded = verify(workplace_bridge.url, token, {"trajectory": {"format": "recorded"}})
    upstream = upstream_url(workplace_bridge.url)
    assert bridged["reward"] == recorded["reward"] == native_reward(upstream, row, solution) == 1.0
    assert bridged["_bridge"]["unresolved"] == []
    if include_server:
        assert bridged["_bridge"]["normalized"] == {
            n: t for n, (t, _) in zip(model.emitted, solution, strict=True)
        }
    wrong = verify(workplace_bridge.url, token, {**other, "response": response})
    assert wrong["reward"] == 0.0 == native_reward(upstream, other, solution)
    tools = [t["name"] for t in row["responses_create_params"]["tools"]]
    called = [tool for tool, _ in solution]
    record_names("openai-agents", NAMES, server, tools, model.emitted, called, names_note(include_server))
