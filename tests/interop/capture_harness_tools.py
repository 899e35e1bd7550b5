#!/usr/bin/env python3
"""Capture the harness's own tools each real CLI offers its model next to the bridge's MCP tools.

    .venv/bin/python tests/interop/capture_harness_tools.py [--bridge-src DIR] [--clients codex ...]

For each CLI, one ``gym-mcp-bridge serve`` (``example_session_state_mgmt``) is seeded and
configured as the CLI's MCP server the way ``client-config`` prints it; the pinned CLI runs
against a stub model server of its API that records every request. Every tool name the CLI put in
a request's ``tools`` is kept, except the bridge's own MCP tools (the names the stub recognised as
an offer of a session tool: ``mcp__<srv>__<tool>`` for Claude Code, the ``mcp__<srv>`` namespace
for Codex, ``mcp_<srv>_<tool>`` for Gemini CLI). A Codex namespace's functions are written
``<namespace>.<name>``, as ``/verify`` shows them. Runs:

* Claude Code: once as installed (MCP tools deferred behind its ``ToolSearch``) and once with
  ``ENABLE_TOOL_SEARCH=false`` (MCP tools offered directly);
* Codex: once per model name in ``CODEX_MODELS`` (Codex picks its tool set by model family; an
  unknown name such as Gym's policy models gets the fallback set);
* Gemini CLI: once.

Writes ``tests/fixtures/harness_tools/<client>.json`` = {"client", "version", "command",
"captured", "tools", "runs"}; ``bridge/scoring/harness.py`` is checked against them
(``tests/test_harness_tools.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fixtures.bridges import BridgeProcess, gym_data  # noqa: E402
from tests.interop.client_names import bridge_env, invocation  # noqa: E402
from tests.interop.node import installed_cli  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "harness_tools"
CODEX_MODELS = ("gym-stub-model", "gpt-5.1-codex", "gpt-5", "gpt-4.1")


def tool_names(requests: list[dict[str, Any]], is_mcp: Callable[[str], bool]) -> list[str]:
    """Every tool name in the requests' ``tools`` arrays (Codex namespaces as ``ns.name``), in
    first-seen order, without the bridge's MCP tools."""
    seen: dict[str, None] = {}
    for body in requests:
        for tool in body.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            if tool.get("type") == "namespace":
                for child in tool.get("tools") or []:
                    seen.setdefault(f"{tool['name']}.{child['name']}", None)
            elif isinstance(tool.get("name"), str):
                seen.setdefault(tool["name"], None)
            for group in tool.get("functionDeclarations") or []:  # Gemini API
                seen.setdefault(group["name"], None)
    return [name for name in seen if not is_mcp(name)]


def capture_claude(bridge: BridgeProcess, row: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    from tests import test_clients_claude_code as cc

    claude = installed_cli("claude-code", "claude", f"{cc.CLAUDE_VERSION} (Claude Code)")
    runs = []
    plain_env = cc.claude_env
    for label, tool_search in (("as installed (tool search on)", True), ("ENABLE_TOOL_SEARCH=false", False)):

        def env(home: Path, stub: Any, tool_search: bool = tool_search) -> dict[str, str]:
            values = plain_env(home, stub)
            if tool_search:
                values.pop("ENABLE_TOOL_SEARCH")
            return values

        cc.claude_env = env
        try:
            with tempfile.TemporaryDirectory() as tmp:
                stub, _, _ = cc.run_claude(claude, row, cc.counter_solution(row), bridge.url, Path(tmp))
        finally:
            cc.claude_env = plain_env
        names = tool_names(stub.requests, lambda name: name.startswith("mcp__"))
        runs.append({"run": label, "requests": len(stub.requests), "tools": names})
    return cc.CLAUDE_VERSION, runs


def capture_codex(bridge: BridgeProcess, row: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    from tests import test_clients_codex as tc

    codex = installed_cli("codex", "codex", f"codex-cli {tc.CODEX_VERSION}")
    runs = []
    for model in CODEX_MODELS:
        metadata = tc.run_codex.mcp_metadata(tc.run_codex.seed(bridge.url, row))
        with tc.StubResponsesProvider(tc.counter_solution(row)) as stub:
            config = tc.run_codex.codex_config(
                metadata, model=model, model_base_url=stub.base_url, api_key_env=tc.STUB_KEY_ENV
            )
            _events, stderr, code = tc.run_codex.run_codex_exec(
                codex, config, tc.run_codex.user_prompt(row), env={tc.STUB_KEY_ENV: "stub-key"}, timeout_s=300
            )
        if code != 0:
            raise SystemExit(f"codex exec ({model}) exited {code}:\n{stderr[-3000:]}")
        names = tool_names(stub.requests, lambda name: name.startswith("mcp__"))
        runs.append({"run": f"--model {model}", "requests": len(stub.requests), "tools": names})
    return tc.CODEX_VERSION, runs


def capture_gemini(bridge: BridgeProcess, row: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    from tests import test_clients_gemini as tg

    gemini = installed_cli(
        "gemini", "gemini", tg.GEMINI_VERSION, {"GEMINI_CLI_NO_RELAUNCH": "1"}, last_line=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        stub, _, server, _ = tg.run_gemini(gemini, row, tg.counter_solution(row), bridge.url, Path(tmp))
    names = tool_names(stub.requests, lambda name: name.startswith(f"mcp_{server}_"))
    return tg.GEMINI_VERSION, [{"run": f"-m {tg.MODEL}", "requests": len(stub.requests), "tools": names}]


CLIENTS: dict[
    str, tuple[str, Callable[[BridgeProcess, dict[str, Any]], tuple[str, list[dict[str, Any]]]]]
] = {
    "claude-code": (
        "claude -p <prompt> --output-format stream-json --model claude-stub-model",
        capture_claude,
    ),
    "codex-cli": ("codex exec --json against a stub Responses model", capture_codex),
    "gemini-cli": ("gemini -p <prompt> --output-format stream-json", capture_gemini),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridge-src", type=Path, help="run the bridge package from this directory")
    parser.add_argument("--clients", nargs="*", default=list(CLIENTS), choices=list(CLIENTS))
    args = parser.parse_args(argv)
    log_dir = ROOT / ".cache" / "capture-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    bridge = BridgeProcess(args=[], env=bridge_env(args.bridge_src)).start(log_dir, timeout=240)
    try:
        row = gym_data("example_session_state_mgmt")[0]
        for client in args.clients:
            how, capture = CLIENTS[client]
            version, runs = capture(bridge, row)
            tools = list(dict.fromkeys(name for run in runs for name in run["tools"]))
            fixture = {
                "client": client,
                "version": version,
                "command": f"{invocation(argv)}  # {how}; one run per entry of 'runs'",
                "captured": datetime.date.today().isoformat(),
                "tools": tools,
                "runs": runs,
            }
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / f"{client}.json").write_text(json.dumps(fixture, indent=2) + "\n")
            print(f"{client} {version}: {len(tools)} harness tools: {tools}", file=sys.stderr)
    finally:
        bridge.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
