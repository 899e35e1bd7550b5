"""Unit tests for bridge.tools, in-process: the tool-name rule (name_problem), tools from a row
(from_row), from an upstream's OpenAPI document (from_openapi), from an MCP listing
(from_mcp_listing), names some client cannot take (unsafe_names), and ToolSets (the session's
source, row tool sets interned by content).

Expected values come from the MCP specification's tool-name rule as the module states it (1-128
characters of ``A-Z a-z 0-9 _ . -``), the reserved routes of a Gym resources server (``RESERVED``),
the module docstring of bridge/tools.py (``POST /<name>`` routes are tools, ``POST /{param}`` marks a
catch-all, a route without a body takes an empty object, ``$ref``s are inlined) and the 64-character
function-name cap of Claude, OpenAI and Codex (``CLIENT_NAME_LIMIT``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bridge import tools
from bridge.tools import (
    EMPTY_SCHEMA,
    RESERVED,
    InvalidToolName,
    ToolDiscoveryError,
    ToolSet,
    ToolSets,
    ToolSpec,
    from_mcp_listing,
    from_openapi,
    from_row,
    name_problem,
    unsafe_names,
)

# --------------------------------------------------------------------------------------------
# The name rule
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "read_file", "get-weather", "ns.tool", "A9_.-z", "x" * 128, "0"])
def test_valid_tool_names(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 129,
        "read file",
        "a/b",
        "a?b",
        "a#b",
        "a%20b",
        "héllo",
        "工具",
        "a\nb",
        "a\tb",
        "a:b",
        "a\x00",
    ],
)
def test_names_outside_the_mcp_rule(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None
    assert "is not an MCP tool name (1-128 characters of A-Z a-z 0-9 _ . -)" in problem


@pytest.mark.parametrize("name", sorted(RESERVED))
def test_reserved_names(name: str) -> None:
    assert name_problem(name) == f"tool name {name!r} is reserved for the resources server's own routes"


def test_gym_routes_are_reserved() -> None:
    assert {"seed_session", "verify", "close_session", "aggregate_metrics", "mcp"} <= RESERVED


@pytest.mark.parametrize("name", [None, 5, ["a"], {"name": "a"}])
def test_non_string_names(name: Any) -> None:
    assert name_problem(name) == f"a tool name must be a string, got {type(name).__name__}"


def test_problem_text_is_escaped_and_bounded() -> None:
    problem = name_problem("evil\r\nX-Injected: 1\x1b[31m" + "é" * 300) or ""
    assert problem.isascii() and problem.isprintable()
    assert "\n" not in problem and "\r" not in problem
    assert len(problem) < 200  # the name is cut, not echoed whole


# --------------------------------------------------------------------------------------------
# from_row
# --------------------------------------------------------------------------------------------


def row(*declared: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": "hi", "tools": list(declared)}}


def test_from_row_reads_responses_and_chat_style_tools() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    specs = from_row(
        row(
            {"type": "function", "name": "read_file", "description": "Read.", "parameters": schema},
            {"type": "function", "function": {"name": "search", "parameters": schema}},
            {"name": "untyped"},  # no type: a function tool
        )
    )
    assert specs == [
        ToolSpec("read_file", "Read.", schema),
        ToolSpec("search", "", schema),
        ToolSpec("untyped", "", EMPTY_SCHEMA),
    ]


def test_from_row_skips_tools_that_are_not_functions() -> None:
    specs = from_row(row({"type": "web_search"}, "read_file", {"type": "function", "name": "ok"}))
    assert [s.name for s in specs] == ["ok"]


@pytest.mark.parametrize(
    "value", [{}, {"responses_create_params": None}, {"responses_create_params": {"tools": "x"}}]
)
def test_from_row_without_tools(value: dict[str, Any]) -> None:
    assert from_row(value) == []


@pytest.mark.parametrize(
    ("bad", "shown"),
    [("read file", "'read file'"), ("a/b", "'a/b'"), ("../verify", "'../verify'"), ("verify", "'verify'")],
)
def test_from_row_refuses_a_name_against_the_rule_naming_it(bad: str, shown: str) -> None:
    with pytest.raises(InvalidToolName) as info:
        from_row(row({"type": "function", "name": "ok"}, {"type": "function", "name": bad}))
    message = str(info.value)
    assert message.startswith("responses_create_params.tools[1]: ")
    assert shown in message


def test_from_row_refuses_a_tool_without_a_name() -> None:
    with pytest.raises(InvalidToolName, match=r"tools\[0\]: a tool name must be a string, got NoneType"):
        from_row(row({"type": "function", "function": {"parameters": {}}}))


# --------------------------------------------------------------------------------------------
# from_openapi
# --------------------------------------------------------------------------------------------


def post(schema: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    operation: dict[str, Any] = dict(extra)
    if schema is not None:
        operation["requestBody"] = {"content": {"application/json": {"schema": schema}}}
    return {"post": operation}


SPEC: dict[str, Any] = {
    "paths": {
        "/get_weather": post({"$ref": "#/components/schemas/WeatherRequest"}, description="Weather."),
        "/ping": post(summary="Ping."),
        "/seed_session": post({"type": "object"}),
        "/verify": post({"type": "object"}),
        "/bad name": post(),
        "/a/b": post(),
        "/status": {"get": {}},
        "/items/{item_id}": post(),
        "/tree": post({"$ref": "#/components/schemas/Node"}),
    },
    "components": {
        "schemas": {
            "WeatherRequest": {
                "title": "WeatherRequest",
                "type": "object",
                "properties": {"city": {"$ref": "#/components/schemas/City"}},
                "required": ["city"],
            },
            "City": {"type": "string", "title": "City"},
            "Node": {
                "type": "object",
                "title": "Node",
                "properties": {"child": {"$ref": "#/components/schemas/Node"}},
            },
        }
    },
}


def test_from_openapi_tools_schemas_and_descriptions() -> None:
    toolset, catch_all, _ = from_openapi(SPEC)
    assert not catch_all
    assert toolset.names == ("get_weather", "ping", "tree")
    weather = toolset.tools["get_weather"]
    assert weather.description == "Weather."
    assert weather.input_schema == {
        "type": "object",
        "properties": {"city": {"type": "string", "title": "City"}},
        "required": ["city"],
    }
    ping = toolset.tools["ping"]
    assert ping.description == "Ping."
    assert ping.input_schema == EMPTY_SCHEMA
    # a recursive model stops inlining where it recurses
    assert toolset.tools["tree"].input_schema == {
        "type": "object",
        "properties": {"child": {"type": "object"}},
    }


def test_from_openapi_skips_bad_routes_with_a_reason_and_reserved_ones_silently() -> None:
    _, _, skipped = from_openapi(SPEC)
    assert len(skipped) == 2
    assert any("'bad name'" in reason and "not an MCP tool name" in reason for reason in skipped)
    assert any("'a/b'" in reason for reason in skipped)
    assert not any("seed_session" in reason or "verify" in reason for reason in skipped)


def test_from_openapi_does_not_change_the_document() -> None:
    spec = copy.deepcopy(SPEC)
    from_openapi(spec)
    assert spec == SPEC


@pytest.mark.parametrize(
    ("path", "catch_all"), [("/{tool_name}", True), ("/{a}/{b}", False), ("/x/{a}", False)]
)
def test_catch_all_detection(path: str, catch_all: bool) -> None:
    toolset, found, _ = from_openapi({"paths": {path: post(), "/seed_session": post()}})
    assert found is catch_all
    assert toolset.names == ()


def test_catch_all_plus_declared_routes() -> None:
    toolset, catch_all, _ = from_openapi({"paths": {"/{name}": post(), "/step": post()}})
    assert catch_all and toolset.names == ("step",)


def test_from_openapi_without_paths() -> None:
    with pytest.raises(ToolDiscoveryError):
        from_openapi({"openapi": "3.1.0"})


# --------------------------------------------------------------------------------------------
# from_mcp_listing
# --------------------------------------------------------------------------------------------


def test_from_mcp_listing_skips_bad_names() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    found, skipped = from_mcp_listing(
        [
            {"name": "search", "description": "Search.", "inputSchema": schema},
            {"name": "bad/name"},
            {"name": "plain", "inputSchema": "not a schema"},
            {"description": "no name"},
            {"name": "verify"},
        ]
    )
    assert found == [ToolSpec("search", "Search.", schema), ToolSpec("plain", "", EMPTY_SCHEMA)]
    assert len(skipped) == 3
    assert "'bad/name'" in skipped[0]
    assert skipped[1] == "a tool name must be a string, got NoneType"
    assert "reserved" in skipped[2]


# --------------------------------------------------------------------------------------------
# unsafe_names
# --------------------------------------------------------------------------------------------


def test_unsafe_names_by_characters_and_prefixed_length() -> None:
    prefix = len("mcp__srv__")
    fits = "a" * (tools.CLIENT_NAME_LIMIT - prefix)
    too_long = fits + "a"
    assert unsafe_names(["read_file", "get-x", fits, too_long, "ns.tool"], "srv") == [too_long, "ns.tool"]


# --------------------------------------------------------------------------------------------
# ToolSet and ToolSets
# --------------------------------------------------------------------------------------------


def specs(*names: str, description: str = "") -> list[ToolSpec]:
    return [
        ToolSpec(n, description, {"type": "object", "properties": {"x": {"type": "string"}}}) for n in names
    ]


OPENAPI = ToolSet({s.name: s for s in specs("step")})


def test_mcp_tools_are_built_once_and_carry_the_schema() -> None:
    toolset = ToolSet({s.name: s for s in [*specs("a"), *specs("b", description="B.")]})
    listed = toolset.mcp_tools()
    assert listed is toolset.mcp_tools()
    assert [(t.name, t.description) for t in listed] == [("a", None), ("b", "B.")]
    assert listed[0].input_schema == {"type": "object", "properties": {"x": {"type": "string"}}}


def test_same_row_tools_give_the_same_toolset() -> None:
    sets = ToolSets(OPENAPI, catch_all=False, sources=["row"])
    first = sets.for_row(specs("a", "b"))
    assert sets.for_row(specs("a", "b")) is first  # equal content built afresh
    assert first.names == ("a", "b")


def test_schema_key_order_is_not_content() -> None:
    sets = ToolSets(OPENAPI, catch_all=False, sources=["row"])
    one = sets.for_row([ToolSpec("a", "", {"type": "object", "properties": {}})])
    two = sets.for_row([ToolSpec("a", "", {"properties": {}, "type": "object"})])
    assert one is two


@pytest.mark.parametrize(
    "other",
    [
        specs("a", "c"),
        specs("b", "a"),
        specs("a", "b", description="changed"),
        [ToolSpec("a", "", {"type": "object"}), *specs("b")],
    ],
)
def test_different_row_tools_give_different_toolsets(other: list[ToolSpec]) -> None:
    sets = ToolSets(OPENAPI, catch_all=False, sources=["row"])
    first = sets.for_row(specs("a", "b"))
    second = sets.for_row(other)
    assert second is not first
    assert second.names == tuple(s.name for s in other)
    assert first.names == ("a", "b")


@pytest.mark.parametrize(
    ("sources", "openapi", "row_tools", "expected"),
    [
        (["openapi", "row"], OPENAPI, specs("a"), ("step",)),
        (["openapi", "row"], ToolSet({}), specs("a"), ("a",)),
        (["row", "openapi"], OPENAPI, specs("a"), ("a",)),
        (["row", "openapi"], OPENAPI, [], ("step",)),
        (["row"], OPENAPI, [], ()),
        (["openapi"], OPENAPI, specs("a"), ("step",)),
        ([], OPENAPI, specs("a"), ()),
    ],
)
def test_for_row_takes_the_first_non_empty_source(
    sources: list[str], openapi: ToolSet, row_tools: list[ToolSpec], expected: tuple[str, ...]
) -> None:
    assert ToolSets(openapi, catch_all=False, sources=sources).for_row(row_tools).names == expected


def test_openapi_source_is_the_upstream_toolset_itself() -> None:
    sets = ToolSets(OPENAPI, catch_all=False, sources=["openapi"])
    assert sets.for_row([]) is OPENAPI
