#!/usr/bin/env python3
"""Gemini CLI MCP tool names: its own test vectors, confirmed by running its published code.

    .venv/bin/python tests/interop/capture_gemini_names.py [--out FILE]

1. ``SOURCE_CASES`` / ``SOURCE_VECTORS`` are the input/expected pairs of Gemini CLI's own tests
   (``SOURCE_FILE`` at ``SOURCE_COMMIT``, tag ``v0.56.0``), copied as data.
2. ``npm ci`` installs ``@google/gemini-cli@0.56.0`` (``tests/interop/gemini``); ``gemini_names.mjs``
   imports the bundle chunk that exports ``DiscoveredMCPTool`` and ``generateValidName`` and
   computes the names for the same inputs, which must equal the expected ones, and for the Gym
   tools (as the bridge listed them to Codex, from ``codex-cli.json``) under a few server names.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.interop.client_names import CAPTURED, FIXTURES, invocation, write_fixture  # noqa: E402
from tests.interop.node import ensure_packages  # noqa: E402

OUT = FIXTURES / "gemini-cli.json"
VERSION = "0.56.0"
SOURCE_FILE = "google-gemini/gemini-cli packages/core/src/tools/mcp-tool.test.ts"
SOURCE_COMMIT = "b6e23a7dc29eb15fede4bbe646d91869e948b45a"  # tag v0.56.0 (same file at 5411f113, 2026-08-21)
LONG_SERVER = "gym_bridge_rollout_session_0001_example_state_mgmt"  # 50 characters

# (server, tool, expected name or None when the test only bounds it, what the test asserts)
SOURCE_CASES: list[tuple[str, str, str | None, str]] = [
    (
        "mock-mcp-server",
        "actual-server-tool-name",
        "mcp_mock-mcp-server_actual-server-tool-name",
        "describe('DiscoveredMCPTool'): expect(tool.name).toBe(...)",
    ),
    (
        "My Server",
        "my-tool",
        "mcp_My_Server_my-tool",
        "'should generate a valid qualified name even with spaces in server name': getFullyQualifiedName()",
    ),
    (
        "123-server",
        "tool",
        "mcp_123-server_tool",
        "'should handle server names starting with digits': getFullyQualifiedName()",
    ),
    ("github", "list_repos", "mcp_github_list_repos", "formatMcpToolName('github', 'list_repos')"),
    (
        "a" * 40,
        "b" * 40,
        None,
        "'should handle long server and tool names in qualified name': length <= 63 and contains '...'",
    ),
]
# generateValidName(input) -> expected, whole strings (no server/tool split)
SOURCE_VECTORS: list[tuple[str, str]] = [
    ("myFunction", "mcp_myFunction"),
    ("invalid-name with spaces", "mcp_invalid-name_with_spaces"),
    ("x" * 80, "mcp_" + "x" * 26 + "..." + "x" * 30),
    ("!@#$%^&*()", "mcp___________"),
    ("My Tool", "mcp_My_Tool"),
    ("namespace:tool", "mcp_namespace:tool"),
    ("valid_tool_name", "mcp_valid_tool_name"),
    ("alsoValid-123.name", "mcp_alsoValid-123.name"),
    ("another:valid:name", "mcp_another:valid:name"),
    ("a" * 40 + "__" + "b" * 40, "mcp_" + "a" * 26 + "..." + "b" * 30),  # the test: /^mcp_a{26}\.\.\.b{30}$/
]
SEED_SERVERS = ("example_session_state_mgmt", "workplace_assistant")
# Gym tools under these server names (None = the env's own seed server_name)
GYM_SERVERS: list[str | None] = [None, "example-session.state", LONG_SERVER]


def gym_tools() -> dict[str, list[str]]:
    """{seed server name: tools the bridge listed}, from the Codex capture of the same envs."""
    codex = json.loads((FIXTURES / "codex-cli.json").read_text())
    return {c["server"]: c["tools"] for c in codex["cases"] if c["server"] in SEED_SERVERS}


def run_node(pairs: list[tuple[str, str]], names: list[str]) -> dict[str, Any]:
    installed = ensure_packages("gemini")
    result = subprocess.run(
        ["node", str(installed.path / "gemini_names.mjs")],
        input=json.dumps({"pairs": pairs, "names": names}),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    envs = gym_tools()
    gym = [
        (server or seed, tool, tools)
        for seed, tools in envs.items()
        for server in GYM_SERVERS
        for tool in tools
    ]
    pairs = [(s, t) for s, t, _, _ in SOURCE_CASES] + [(s, t) for s, t, _ in gym]
    node = run_node(pairs, [name for name, _ in SOURCE_VECTORS])
    if node["version"] != VERSION:
        raise SystemExit(f"expected @google/gemini-cli {VERSION}, got {node['version']}")
    computed: list[str] = node["tools"]
    for (name, expected), got in zip(SOURCE_VECTORS, node["valid_names"], strict=True):
        if got != expected:
            raise SystemExit(f"generateValidName({name!r}) = {got!r}, the test expects {expected!r}")
    cases: list[dict[str, Any]] = []
    ran = f"@google/gemini-cli@{VERSION} DiscoveredMCPTool(...).name, run with node"
    for (server, tool, expected, asserted), got in zip(
        SOURCE_CASES, computed[: len(SOURCE_CASES)], strict=True
    ):
        if expected is not None and got != expected:
            raise SystemExit(f"{server}/{tool}: node gave {got!r}, the test expects {expected!r}")
        if expected is None and not (len(got) <= 63 and "..." in got):
            raise SystemExit(f"{server}/{tool}: node gave {got!r}, outside the test's bounds")
        note = f"source test vector: {asserted}" + ("" if expected else f"; exact value from {ran}")
        cases.append(
            {"server": server, "tool": tool, "emitted": got, "namespace": None, "tools": [tool], "note": note}
        )
    for (server, tool, tools), got in zip(gym, computed[len(SOURCE_CASES) :], strict=True):
        case = {"server": server, "tool": tool, "emitted": got, "namespace": None, "tools": tools}
        cases.append({**case, "note": f"not a source vector: {ran} on a Gym tool"})
    header = {
        "client": "gemini-cli",
        "version": VERSION,
        "command": (
            f"{invocation(argv)}  # npm ci of tests/interop/gemini (@google/gemini-cli@{VERSION}) into "
            ".cache/interop/gemini, then: node .cache/interop/gemini/gemini_names.mjs < "
            '{"pairs": [[server, tool], ...], "names": [...]} (imports the bundle chunk exporting '
            "DiscoveredMCPTool and generateValidName; node " + subprocess_node_version() + ")"
        ),
        "captured": CAPTURED,
        "source": f"{SOURCE_FILE} @ {SOURCE_COMMIT}",
        "generate_valid_name_vectors": [{"input": i, "expected": e} for i, e in SOURCE_VECTORS],
        "bundle_chunk": node["chunk"],
    }
    write_fixture(args.out, header, cases)
    print(f"wrote {len(cases)} cases to {args.out}", file=sys.stderr)
    return 0


def subprocess_node_version() -> str:
    return subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
