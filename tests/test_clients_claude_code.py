"""The real Claude Code CLI (``@anthropic-ai/claude-code``, pinned in ``tests/interop/claude-code``)
running whole rollouts through the bridge.

Claude Code needs an Anthropic model; none is reachable here, so ``ANTHROPIC_BASE_URL`` points at
``StubAnthropicMessages`` (``tests/interop/stubs/anthropic_stub.py``): a local stub of the Messages
API (SSE streaming) that replays the calls solving the row, read from the row itself, addressed to
the tool names Claude Code offered. Everything else is real: the MCP server is added exactly as
``gym-mcp-bridge client-config --client claude-code`` prints it (the ``claude mcp add`` line, or
its ``.mcp.json`` with ``--mcp-config``), ``claude -p --output-format stream-json`` connects to the
bridge's ``/mcp`` with the session header and calls the tools, and ``/verify`` runs Gym's verifier
on the CLI's own transcript (trajectory format ``anthropic``) and on the bridge's log (``recorded``).
The reward must equal the one the same calls score natively on the same Gym server; a stub
solving another row scores 0.0.

Two switches the run needs, both measured with 2.1.332: it runs as root here, where
``--dangerously-skip-permissions`` is refused, so the server's tools are allowed with
``--allowedTools mcp__<server>``; and ``ENABLE_TOOL_SEARCH=false``, since by default the CLI
defers MCP tools behind its ``ToolSearch`` tool (the first request offers no ``mcp__`` tool).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, gym_data, upstream_url
from tests.fixtures.harness import (
    Solution,
    client_config,
    counter_solution,
    ground_truth_solution,
    native_reward,
    record_names,
    verify,
)
from tests.interop.node import installed_cli
from tests.interop.stubs.anthropic_stub import StubAnthropicMessages
from tests.test_clients_codex import run_codex

pytestmark = pytest.mark.npm

CLAUDE_VERSION = "2.1.332"
STUB_MODEL = "claude-stub-model"


@pytest.fixture(scope="module")
def claude() -> Iterator[str]:
    yield installed_cli("claude-code", "claude", f"{CLAUDE_VERSION} (Claude Code)")


def claude_config(bridge_url: str, row: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """``gym-mcp-bridge client-config --client claude-code``: the ``claude mcp add`` argv and the
    ``.mcp.json`` it prints (one seeded session, the same token in both)."""
    lines = client_config("claude-code", bridge_url, row).splitlines()
    add = shlex.split(next(line for line in lines if line.startswith("claude mcp add ")))
    start = next(i for i, line in enumerate(lines) if line.startswith("{"))
    return add, json.loads("\n".join(lines[start:]))


def claude_env(home: Path, stub: StubAnthropicMessages) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": stub.base_url,
        "ANTHROPIC_API_KEY": "stub-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "ENABLE_TOOL_SEARCH": "false",
    }


def run_claude(
    claude: str,
    row: dict[str, Any],
    solution: Solution,
    bridge_url: str,
    tmp: Path,
    via: str = "mcp-add",
) -> tuple[StubAnthropicMessages, list[dict[str, Any]], str]:
    """Configure the server as client-config prints it, run ``claude -p``; (stub, events, token)."""
    add, mcp_json = claude_config(bridge_url, row)
    server = add[add.index("http") + 1]
    token = mcp_json["mcpServers"][server]["headers"][HEADER]
    home, work = tmp / "home", tmp / "work"
    home.mkdir()
    work.mkdir()
    args = [
        "-p", run_codex.user_prompt(row), "--output-format", "stream-json", "--verbose",
        "--model", STUB_MODEL, "--allowedTools", f"mcp__{server}", "--max-turns", "30",
    ]  # fmt: skip
    with StubAnthropicMessages(solution) as stub:
        env = claude_env(home, stub)
        if via == "mcp-add":
            added = subprocess.run(
                [claude, *add[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=120
            )
            assert added.returncode == 0, added.stderr + added.stdout
        else:
            (work / ".mcp.json").write_text(json.dumps(mcp_json))
            args += ["--mcp-config", str(work / ".mcp.json"), "--strict-mcp-config"]
        started = time.monotonic()
        ran = subprocess.run([claude, *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        print(f"\nclaude -p ({via}): {time.monotonic() - started:.1f}s, exit {ran.returncode}")
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    events = [json.loads(line) for line in ran.stdout.splitlines() if line.strip().startswith("{")]
    return stub, events, token


def transcript(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The CLI's stream-json as an ``anthropic`` trajectory: its assistant and user messages."""
    messages = [e["message"] for e in events if e.get("type") in ("assistant", "user")]
    result = next(e for e in events if e.get("type") == "result")
    return {"format": "anthropic", "messages": messages, "final_text": result.get("result")}


def tool_uses(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        block
        for e in events
        if e.get("type") == "assistant"
        for block in e["message"]["content"]
        if block.get("type") == "tool_use"
    ]


NAMES = {  # the header of the names fixture this test writes (``record_names``)
    "version": CLAUDE_VERSION,
    "command": (
        "tests/test_clients_claude_code.py: HOME=<tmp> ANTHROPIC_BASE_URL=<stub Messages API> "
        "ENABLE_TOOL_SEARCH=false claude -p <row prompt> --output-format stream-json --verbose "
        "--allowedTools mcp__<server>, after the `claude mcp add` line of `gym-mcp-bridge "
        "client-config --client claude-code` (or its .mcp.json with --mcp-config); 'emitted' = the "
        "tool name Claude Code offered the model (the stub called it), 'tool' = the session tool "
        "the bridge served for that call (its recorded log scores the same reward)"
    ),
    "source": f"npm @anthropic-ai/claude-code@{CLAUDE_VERSION} (tests/interop/claude-code/package-lock.json)",
}


# -- tests ----------------------------------------------------------------------------------------


def test_claude_code_counter_rollout_scores_like_native(
    claude: str, counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    row = gym_data("example_session_state_mgmt")[0]  # 3 -> 6
    solution = counter_solution(row)
    stub, events, token = run_claude(claude, row, solution, counter_bridge.url, tmp_path)
    server = "example_session_state_mgmt"
    offered = stub.offered(stub.loop_requests[0])
    assert {f"mcp__{server}__increment_counter", f"mcp__{server}__get_counter_value"} <= set(offered)
    assert stub.emitted == [f"mcp__{server}__increment_counter", f"mcp__{server}__get_counter_value"]
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    assert init["claude_code_version"] == CLAUDE_VERSION
    assert {"name": server, "status": "connected", "source": "local"} in init["mcp_servers"]
    # the CLI really called the bridge: these are the tool results it handed back
    results = [
        b["content"] for e in events if e.get("type") == "user" for b in e["message"]["content"]
        if b.get("type") == "tool_result"
    ]  # fmt: skip
    assert [json.loads(r) for r in results] == [{"success": True}, {"count": 6}]

    converted = verify(counter_bridge.url, token, {"trajectory": transcript(events)})
    assert converted["reward"] == 1.0
    assert converted["_bridge"]["normalized"] == {name: name.split("__")[-1] for name in stub.emitted}
    assert converted["_bridge"]["unresolved"] == []
    echoed = [i["name"] for i in converted["response"]["output"] if i["type"] == "function_call"]
    assert echoed == stub.emitted  # the stored rollout keeps Claude Code's names
    recorded = verify(counter_bridge.url, token, {"trajectory": {"format": "recorded"}})
    assert recorded["reward"] == 1.0
    assert recorded["_bridge"]["recorded_tool_calls"] == 2
    assert native_reward(upstream_url(counter_bridge.url), row, solution) == 1.0 == converted["reward"]
    record_names(
        "claude-code",
        NAMES,
        server,
        ["increment_counter", "get_counter_value"],
        stub.emitted,
        [t for t, _ in solution],
        "claude mcp add --transport http <server> <url> --header ... (as client-config prints it)",
    )


def test_claude_code_solving_another_row_scores_zero(
    claude: str, counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    rows = gym_data("example_session_state_mgmt")
    row, other = rows[0], rows[1]  # 3 -> 6; the stub increments by row 1's 9: 3 + 9 = 12
    solution = counter_solution(other)
    stub, events, token = run_claude(claude, row, solution, counter_bridge.url, tmp_path)
    assert len(stub.emitted) == 2
    converted = verify(counter_bridge.url, token, {"trajectory": transcript(events)})
    recorded = verify(counter_bridge.url, token, {"trajectory": {"format": "recorded"}})
    native = native_reward(upstream_url(counter_bridge.url), row, solution)
    assert converted["reward"] == recorded["reward"] == native == 0.0
    assert converted["_bridge"]["unresolved"] == []  # the names resolved; the actions were wrong


def test_claude_code_workplace_assistant_ground_truth_scores_like_native(
    claude: str, workplace_bridge: BridgeProcess, tmp_path: Path
) -> None:
    """The catch-all env (tools from the row), configured through ``.mcp.json``: Gym's verifier
    replays the function calls, so the restored names decide the reward."""
    rows = gym_data("workplace_assistant")
    row, other = rows[0], rows[1]
    solution = ground_truth_solution(row)
    stub, events, token = run_claude(claude, row, solution, workplace_bridge.url, tmp_path, via="mcp-json")
    server = "workplace_assistant"
    expected = [f"mcp__{server}__{tool}" for tool, _ in solution]
    assert stub.emitted == expected
    assert [b["name"] for b in tool_uses(events)] == expected
    tools = [t["name"] for t in row["responses_create_params"]["tools"]]
    assert {f"mcp__{server}__{t}" for t in tools} <= set(stub.offered(stub.loop_requests[0]))

    trajectory = transcript(events)
    converted = verify(workplace_bridge.url, token, {"trajectory": trajectory})
    recorded = verify(workplace_bridge.url, token, {"trajectory": {"format": "recorded"}})
    native = native_reward(upstream_url(workplace_bridge.url), row, solution)
    assert converted["reward"] == recorded["reward"] == native == 1.0
    assert converted["_bridge"]["normalized"] == {f"mcp__{server}__{t}": t for t, _ in solution}
    # the same transcript against another row's ground truth: 0.0, bridged and native
    wrong = verify(workplace_bridge.url, token, {**other, "trajectory": trajectory})
    assert wrong["reward"] == 0.0 == native_reward(upstream_url(workplace_bridge.url), other, solution)
    record_names(
        "claude-code",
        NAMES,
        server,
        tools,
        stub.emitted,
        [t for t, _ in solution],
        ".mcp.json from client-config, --mcp-config --strict-mcp-config",
    )
