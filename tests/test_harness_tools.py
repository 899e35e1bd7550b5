"""Harness-side tools (issue 21 item 5), in-process: ``bridge.scoring.harness`` against the tools the
real CLIs offered, and ``verify.normalize`` on the worst cases.

The names come from the CLIs' own requests, captured by ``tests/interop/capture_harness_tools.py``
into ``tests/fixtures/harness_tools/<client>.json`` (client, version, command, date); the bridge's
table must equal them, client by client, and every fixture present must have its row (a fixture
another task adds for another CLI fails this test until the table has it).

The worst case is a session tool that shares its bare name with a harness tool: Gemini CLI 0.56.0
offers its own ``read_file`` (captured), and a Gym env may have one too; Gym's converters write MCP
calls with bare names. The bare name is credited to the session tool only with a call the session
served (same tool, same arguments) left for it, never on the name alone, never on another
session's log, never twice on one served call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.scoring import harness
from bridge.scoring.naming import canonical_arguments
from bridge.scoring.verify import normalize

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harness_tools"
TOOLS = ("read_file", "search")  # read_file: a session tool and Gemini CLI's own tool
ARGS = '{"path": "a"}'


def fixtures() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(FIXTURES.glob("*.json"))}


def test_fixtures_are_captured_from_the_three_clis_at_least() -> None:
    found = fixtures()
    assert {"claude-code", "codex-cli", "gemini-cli"} <= set(found)
    for client, data in found.items():
        assert data["client"] == client
        for key in ("version", "command", "captured"):
            assert isinstance(data[key], str) and data[key], (client, key)
        assert data["tools"] and all(isinstance(name, str) and name for name in data["tools"])


def test_the_bridge_table_is_the_captured_data() -> None:
    table = {client: sorted(tools) for client, tools in harness.HARNESS_TOOLS.items()}
    captured = {client: sorted(data["tools"]) for client, data in fixtures().items()}
    for client in captured.keys() - table.keys():
        raise AssertionError(
            f"{client}.json has no row in bridge/scoring/harness.py HARNESS_TOOLS: add {captured[client]}"
        )
    assert table == captured


def test_claude_codes_tool_search_and_geminis_read_file_are_known() -> None:
    assert harness.clients_of("ToolSearch") == ["claude-code"]
    assert "gemini-cli" in harness.clients_of("read_file")
    assert harness.clients_of("increment_counter") == []


def test_openclaws_own_tools_are_known() -> None:
    # OpenClaw 2026.6.11's request to its model, as Gym's openclaw_agent runs it (openclaw.json fixture)
    assert harness.clients_of("exec") == ["openclaw"]
    assert harness.clients_of("sessions_spawn") == ["openclaw"]
    assert "openclaw" in harness.clients_of("read") and "pi" in harness.clients_of("read")


def fc(name: str, call_id: str, arguments: str = ARGS, namespace: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function_call", "name": name, "call_id": call_id, "arguments": arguments}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def served(*calls: tuple[str, str]) -> list[tuple[str, bytes | None]]:
    return [(tool, canonical_arguments(arguments)) for tool, arguments in calls]


def run(*items: dict[str, Any], log: list[tuple[str, bytes | None]] | None = None) -> tuple[Any, list[str]]:
    response = {"output": [dict(item) for item in items]}
    report = normalize(response, TOOLS, ["gym"], log or [])
    return report, [item["name"] for item in response["output"]]


def test_a_harness_tool_that_is_no_session_tool_is_reported_as_such_not_as_unresolved() -> None:
    report, names = run(fc("ToolSearch", "c1", '{"query": "select:mcp__gym__search"}'))
    assert report.harness_tools == [{"name": "ToolSearch", "clients": ["claude-code"]}]
    assert report.unresolved == []
    assert names == ["ToolSearch"]  # Gym scores it as the unknown tool it is


def test_a_bare_shared_name_with_the_sessions_own_call_is_credited() -> None:
    report, names = run(fc("read_file", "c1"), log=served(("read_file", ARGS)))
    assert names == ["read_file"]
    assert report.harness_tools == [] and report.unresolved == []


@pytest.mark.parametrize(
    "log",
    [
        pytest.param([], id="no-call-served"),
        pytest.param(served(("read_file", '{"path": "b"}')), id="other-arguments"),
        pytest.param(served(("search", ARGS)), id="other-tool"),
    ],
)
def test_a_bare_shared_name_without_the_sessions_call_is_not_credited(log: list[Any]) -> None:
    report, names = run(fc("read_file", "c1"), log=log)
    assert names == ["unscored:read_file"]  # no tool can have ":": Gym cannot score it as read_file
    assert report.emitted_by_call == {"c1": "read_file"}  # the caller gets its own name back
    [entry] = report.harness_tools
    assert entry["name"] == "read_file" and "gemini-cli" in entry["clients"]
    assert "no call the session served proves it" in entry["reason"]
    assert report.normalized == {}


def test_one_served_call_never_proves_two_calls() -> None:
    # the MCP call (known alias) takes the served call; the harness's own read_file gets nothing
    report, names = run(
        fc("read_file", "c1"), fc("mcp__gym__read_file", "c2"), log=served(("read_file", ARGS))
    )
    assert names == ["unscored:read_file", "read_file"]
    assert report.normalized == {"mcp__gym__read_file": "read_file"}
    # two served calls: both credited
    _, names = run(
        fc("read_file", "c1"),
        fc("mcp__gym__read_file", "c2"),
        log=served(("read_file", ARGS), ("read_file", ARGS)),
    )
    assert names == ["read_file", "read_file"]


def test_a_namespaced_harness_tool_of_codex_is_reported_with_its_namespace() -> None:
    # Codex 0.171.0 offers its sub-agent tools in a namespace: multi_agent_v1.spawn_agent, ...
    namespaced = sorted(name for name in harness.HARNESS_TOOLS["codex-cli"] if "." in name)
    assert "multi_agent_v1.spawn_agent" in namespaced
    namespace, name = "multi_agent_v1", "spawn_agent"
    report, _ = run(fc(name, "c1", "{}", namespace=namespace))
    assert report.harness_tools == [{"name": f"{namespace}.{name}", "clients": ["codex-cli"]}]
    assert report.unresolved == []


def test_provenance_never_lifts_the_rule_even_once_its_server_is_proven() -> None:
    # two bare read_file calls claimed for "my-gym"; one served call proves my-gym for the first,
    # and the second, under a now-known server, still needs a served call of its own
    items = [fc("read_file", "c1"), fc("read_file", "c2")]
    claims = {"c1": ("my-gym", "read_file"), "c2": ("my-gym", "read_file")}
    response = {"output": [dict(item) for item in items]}
    report = normalize(response, TOOLS, ["gym"], served(("read_file", ARGS)), claims)
    assert [item["name"] for item in response["output"]] == ["read_file", "unscored:read_file"]
    assert report.proven_aliases == ["my-gym"]
    assert report.provenance == {"given": 2, "confirmed": 1}
