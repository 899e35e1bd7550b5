#!/usr/bin/env python3
"""Capture the tool names the real OpenAI Agents SDK passes to the model for the bridge's MCP tools.

    .venv/bin/python tests/interop/capture_agents_names.py [--bridge-src DIR] [--out FILE]

For each (Gym env, server names, ``include_server_in_tool_names``) below: start
``gym-mcp-bridge serve`` for the env, seed one row, connect the SDK's own
``MCPServerStreamableHttp`` (named as configured) to the bridge's ``/mcp`` through a recording
proxy, and run a real ``Agent`` with ``Runner.run`` on a stub ``Model``. The stub records the names
of the tools the SDK passed to ``get_response`` on the first turn, then calls each of them once
(one per turn, a dummy value for each required parameter). The proxy's ``tools/call`` requests say which MCP tool each name
reached, so the pairing emitted name -> MCP tool comes from the SDK, not from us.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import Agent, FunctionTool, Runner, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.mcp import MCPServerStreamableHttp  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.fixtures.bridges import BridgeProcess, gym_data  # noqa: E402
from tests.interop.client_names import CAPTURED, FIXTURES, bridge_env, invocation, write_fixture  # noqa: E402
from tests.test_clients_codex import RecordingProxy, run_codex  # noqa: E402

OUT = FIXTURES / "openai-agents.json"
LONG_SERVER = "gym_bridge_rollout_session_0001_example_state_mgmt"  # 50 characters
COLLIDING = ("gym bridge", "gym.bridge")  # both become "gym_bridge": the SDK hashes both
# (env, bridge args, runs: (server names given to MCPServerStreamableHttp, include_server_in_tool_names);
# None = the seed's own server_name)
RUNS: list[tuple[str, list[str], list[tuple[tuple[str | None, ...], bool]]]] = [
    (
        "example_session_state_mgmt",
        [],
        [
            ((None,), False),
            ((None,), True),
            (("example-session.state",), True),
            ((LONG_SERVER,), False),
            ((LONG_SERVER,), True),
            (COLLIDING, True),
        ],
    ),
    (
        "workplace_assistant",
        ["--resources-server", "workplace_assistant"],
        [((None,), False), ((None,), True), ((LONG_SERVER,), True)],
    ),
]


def dummy_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A value for every required parameter (the SDK refuses calls that miss one)."""
    samples: dict[str, Any] = {"string": "x", "integer": 1, "number": 1, "boolean": False, "array": []}
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for key in schema.get("required") or []:
        spec = properties.get(key) or {}
        kind = spec.get("type")
        kind = kind[0] if isinstance(kind, list) else kind
        arguments[key] = spec["enum"][0] if spec.get("enum") else samples.get(str(kind), {})
    return arguments


class ProbingModel(Model):
    """A stub ``Model``: records the tool names it is given, then calls each once, one per turn.

    Before each turn it looks at the recording proxies (one per configured server) to see which
    server received the previous turn's call and under which MCP tool name."""

    def __init__(self, proxies: list[RecordingProxy]) -> None:
        self.proxies = proxies
        self.first_tools: list[str] | None = None
        self.arguments: list[str] = []
        self.reached: list[tuple[int, str]] = []  # per call: (server index, MCP tools/call name)
        self.seen = [0] * len(proxies)

    def _observe(self) -> None:
        for index, proxy in enumerate(self.proxies):
            calls = proxy.rpc("tools/call")
            self.reached += [(index, e["request"]["params"]["name"]) for e in calls[self.seen[index] :]]
            self.seen[index] = len(calls)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        tools = kwargs["tools"] if "tools" in kwargs else args[3]
        if self.first_tools is None:
            function_tools = [t for t in tools if isinstance(t, FunctionTool)]
            self.first_tools = [t.name for t in function_tools]
            self.arguments = [json.dumps(dummy_arguments(t.params_json_schema)) for t in function_tools]
        self._observe()
        step = len(self.reached)
        output: list[Any]
        if step < len(self.first_tools):
            call = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{step}",
                call_id=f"call_{step}",
                name=self.first_tools[step],
                arguments=self.arguments[step],
            )
            output = [call]
        else:
            text = ResponseOutputText(type="output_text", text="Done.", annotations=[])
            output = [
                ResponseOutputMessage(
                    id="msg", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the capture runs Runner.run, not streaming")


async def capture_one(
    bridge: BridgeProcess, row: dict[str, Any], servers: tuple[str | None, ...], include_server: bool
) -> list[dict[str, Any]]:
    metadata = run_codex.mcp_metadata(run_codex.seed(bridge.url, row))
    names = [server or str(metadata["server_name"]) for server in servers]
    headers = {str(k): str(v) for k, v in metadata["headers"].items()}
    async with AsyncExitStack() as stack:
        proxies = [stack.enter_context(RecordingProxy(bridge.url)) for _ in names]
        model = ProbingModel(proxies)
        mcp_servers = [
            await stack.enter_async_context(
                MCPServerStreamableHttp(
                    {"url": f"{proxy.url}{metadata['url_path']}", "headers": headers, "timeout": 60},
                    name=name,
                    cache_tools_list=True,
                    client_session_timeout_seconds=60,
                )
            )
            for name, proxy in zip(names, proxies, strict=True)
        ]
        agent = Agent(
            name="probe",
            instructions="Call each tool once.",
            model=model,
            mcp_servers=list(mcp_servers),
            mcp_config={"include_server_in_tool_names": include_server},
        )
        await Runner.run(agent, "Call each tool once.", max_turns=200)
    listed = [t["name"] for t in proxies[0].rpc("tools/list")[0]["answer"]["result"]["tools"]]
    emitted = model.first_tools or []
    if len(model.reached) != len(emitted) or len(emitted) != len(listed) * len(names):
        raise SystemExit(f"{names}: offered {emitted}, listed {listed}, tools/call {model.reached}")
    option = f"mcp_config={{'include_server_in_tool_names': {include_server}}}"
    cases = []
    for name, (index, tool) in zip(emitted, model.reached, strict=True):
        note = f"{option}; the SDK sent tools/call {tool!r} to this server for it"
        if len(names) > 1:
            note += f"; servers on the agent: {names}"
        case = {"server": names[index], "tool": tool, "emitted": name, "namespace": None, "tools": listed}
        cases.append({**case, "note": note})
    return cases


async def capture(source: Path | None) -> list[dict[str, Any]]:
    log_dir = ROOT / ".cache" / "capture-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cases: list[dict[str, Any]] = []
    for env, bridge_args, runs in RUNS:
        bridge = BridgeProcess(args=bridge_args, env=bridge_env(source)).start(log_dir, timeout=240)
        try:
            row = gym_data(env)[0]
            for servers, include_server in runs:
                found = await capture_one(bridge, row, servers, include_server)
                cases += found
                print(f"{env} / {servers} / {include_server}: {len(found)} tools", file=sys.stderr)
        finally:
            bridge.stop()
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--bridge-src",
        type=Path,
        help="run the bridge package from this directory (e.g. a git archive of HEAD)",
    )
    args = parser.parse_args(argv)
    set_tracing_disabled(True)
    version = importlib.metadata.version("openai-agents")
    cases = asyncio.run(capture(args.bridge_src))
    header = {
        "client": "openai-agents",
        "version": version,
        "command": (
            f"{invocation(argv)}  # for each run in RUNS: Runner.run(Agent(model=<stub Model>, "
            "mcp_servers=[MCPServerStreamableHttp({'url': <bridge>/mcp, 'headers': <session header>}, "
            "name=<server>)], mcp_config={'include_server_in_tool_names': <flag>}), ...); 'emitted' = "
            "the FunctionTool names the SDK passed to Model.get_response on the first turn; 'tool' = the "
            "MCP tools/call name the SDK sent when the stub called that name"
        ),
        "captured": CAPTURED,
        "source": f"PyPI openai-agents=={version} (pyproject.toml dev group, uv.lock)",
    }
    write_fixture(args.out, header, cases)
    print(f"wrote {len(cases)} cases to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
