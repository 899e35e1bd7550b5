"""Harness-side tools, in-process: ``bridge.scoring.harness`` against the tools the
real CLIs offered, and ``verify.normalize`` on the worst cases.

The names come from the CLIs' own requests, captured by ``tests/interop/capture_harness_tools.py``
into ``tests/fixtures/harness_tools/<client>.json`` (client, version, command, date); the bridge's
table must equal them, client by client, and every fixture present must have its row (a fixture
another task adds for another CLI fails this test until the table has it). One fixture is no capture:
``gym-codex-agent.json`` holds the names Gym 0.7.0's ``codex_agent`` writes for Codex's own items
(shell command, file change, built-in web search, plan), and the test below re-reads them from the
wheel's own source, so the expected names are Gym's, not this table's.

The worst case is a session tool that shares its bare name with a harness tool: Gemini CLI 0.56.0
offers its own ``read_file`` (captured), and a Gym env may have one too; Gym's converters write MCP
calls with bare names. The bare name is credited to the session tool only with a call the session
served (same tool, same arguments) left for it, never on the name alone, never on another
session's log, never twice on one served call.
"""

from __future__ import annotations

import ast
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


def converter_names(source: str, function: str) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    """Gym's ``codex_agent`` converter read as code: for each ``itype == "<item>"`` branch of
    ``function`` that writes a function call (``_add_tool_pair(item, name, ...)``), item -> (name,
    line) when the name is a constant, else item -> the expression that computes it."""
    tree = ast.parse(source)
    [func] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    constant: dict[str, tuple[str, int]] = {}
    computed: dict[str, str] = {}
    for branch in ast.walk(func):
        test = branch.test if isinstance(branch, ast.If) else None
        if not (
            isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "itype"
        ):
            continue
        assert isinstance(branch, ast.If) and isinstance(test.comparators[0], ast.Constant)
        item_type = str(test.comparators[0].value)
        for node in (n for statement in branch.body for n in ast.walk(statement)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "_add_tool_pair"
            ):
                name = node.args[1]
                if isinstance(name, ast.Constant):
                    constant[item_type] = (str(name.value), node.lineno)
                else:
                    computed[item_type] = ast.unparse(name)
    return constant, computed


@pytest.fixture(scope="module")
def gym07_site(request: pytest.FixtureRequest) -> Path:
    """The nemo-gym 0.7.0 wheel's site-packages (the environment built first when it is missing)."""
    from tools import gym_env

    def found() -> list[Path]:
        return sorted((gym_env.GYM07_ENV / "lib").glob("python3.*/site-packages/nemo_gym-0.7.0.dist-info"))

    if not found():
        request.getfixturevalue("gym07_python")
    return found()[0].parent


def test_gym_codex_agents_own_names_are_read_from_gyms_source(gym07_site: Path) -> None:
    data = fixtures()["gym-codex-agent"]
    source = data["source"]
    text = (gym07_site / source["path"]).read_text()
    constant, computed = converter_names(text, source["function"])
    assert {item: name for item, (name, _) in constant.items()} == data["items"]
    assert sorted({name for name, _ in constant.values()}) == sorted(data["tools"])
    first, last = source["lines"]
    assert all(first <= line <= last for _, line in constant.values()), constant  # the citation holds
    # an MCP call is written under the bare tool name Codex reports, with no server in it
    assert computed == {"mcp_tool_call": "str(item.get('tool') or '')"}


def test_gym_codex_agents_own_calls_are_harness_tools() -> None:
    # the transcript Gym's codex_agent writes: Codex's built-in web search, a file change and its plan
    # under the names of its converter; the session's own tool is also called web_search
    tools = ("web_search", "read_file")
    output = [
        fc("web_search", "item_1", '{"query": "q"}'),
        fc("apply_patch", "item_2", '{"changes": []}'),
        fc("update_plan", "item_3", '{"items": []}'),
    ]
    response = {"output": [dict(item) for item in output]}
    report = normalize(response, tools, ["gym"], [])
    assert [item["name"] for item in response["output"]] == [
        "unscored:web_search",
        "apply_patch",
        "update_plan",
    ]
    assert report.harness_tools == [
        {
            "name": "web_search",
            "clients": ["gym-codex-agent", "openclaw"],
            "reason": "also a tool of this session; no call the session served proves it",
        },
        {"name": "apply_patch", "clients": ["gym-codex-agent", "openclaw"]},
        {"name": "update_plan", "clients": ["gym-codex-agent", "openclaw"]},
    ]
    # the same web_search with the session's own served call (an MCP call Codex made) is credited
    response = {"output": [dict(output[0])]}
    report = normalize(response, tools, ["gym"], served(("web_search", '{"query": "q"}')))
    assert response["output"][0]["name"] == "web_search" and report.harness_tools == []


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
