"""Tool discovery and the tool sets sessions are served from.

Two sources, per DESIGN "Tools":

- ``from_openapi``: the upstream's ``/openapi.json``. Every ``POST /<name>`` route outside the
  reserved names becomes a tool; its JSON body schema (``$ref``s inlined) is the input schema,
  and a route without a body takes an empty object. A ``POST /{param}`` route marks the upstream
  as a catch-all dispatcher, whose tools exist only in the rows.
- ``from_row``: the function tools of a seeded row's ``responses_create_params.tools``, the
  per-task list the model sees natively.

``ToolSets`` interns row tool lists by content, so thousands of sessions seeded from the same
dataset share one ``ToolSet``; a session keeps only a reference. Call arguments are not checked
against the schemas here: the upstream validates them and the model reads its answer, as natively.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from bridge import exactjson

RESERVED = frozenset({"seed_session", "verify", "close_session", "aggregate_metrics", "reverify_mode", "mcp"})
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # the MCP spec's tool-name rule
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# Claude and OpenAI cap function names at 64 (Codex 0.171.0 hashes past 128: docs/naming.md)
CLIENT_NAME_LIMIT = 64
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]+")
_INTERNED_LIMIT = 1024


class ToolDiscoveryError(ValueError):
    pass


class InvalidToolName(ValueError):
    """A row declares a tool whose name is not an MCP tool name; str(exc) names it."""


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a tool name (MCP: 1-128 of ``[A-Za-z0-9_.-]``, not reserved), else None."""
    if not isinstance(name, str):
        return f"a tool name must be a string, got {type(name).__name__}"
    if not TOOL_NAME.fullmatch(name):
        return f"tool name {_shown(name)} is not an MCP tool name (1-128 characters of A-Z a-z 0-9 _ . -)"
    if name in RESERVED:
        return f"tool name {name!r} is reserved for the resources server's own routes"
    return None


def _shown(name: str) -> str:
    """A name for an error line: escaped (no control characters reach a log or a header), bounded."""
    text = name.encode("ascii", "backslashreplace").decode("ascii")
    text = repr(text)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(slots=True)
class ToolSet:
    tools: dict[str, ToolSpec]
    _mcp: list[types.Tool] | None = field(default=None, repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.tools)

    def mcp_tools(self) -> list[types.Tool]:
        if self._mcp is None:
            self._mcp = [
                types.Tool(name=t.name, description=t.description or None, input_schema=t.input_schema)
                for t in self.tools.values()
            ]
        return self._mcp


def _inline_refs(node: Any, components: Mapping[str, Any], seen: tuple[str, ...] = ()) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[-1]
            if name in seen:  # recursive model: stop inlining, accept any object there
                return {"type": "object"}
            target = components.get(name, {})
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline_refs(merged, components, (*seen, name))
        return {k: _inline_refs(v, components, seen) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, components, seen) for v in node]
    return node


def from_openapi(spec: Mapping[str, Any]) -> tuple[ToolSet, bool, list[str]]:
    """(tools, catch_all, skipped) from an upstream's OpenAPI document; ``skipped`` says which POST
    routes are not tools because their name breaks the MCP rule."""
    paths = spec.get("paths")
    if not isinstance(paths, dict):
        raise ToolDiscoveryError("upstream /openapi.json has no paths")
    components = spec.get("components", {}).get("schemas", {})
    tools: dict[str, ToolSpec] = {}
    catch_all = False
    skipped: list[str] = []
    for path, operations in paths.items():
        post = operations.get("post") if isinstance(operations, dict) else None
        if post is None:
            continue
        name = path.strip("/")
        if "{" in name:
            catch_all = catch_all or "/" not in name
            continue
        if name in RESERVED:
            continue
        problem = name_problem(name)
        if problem is not None:
            skipped.append(problem)
            continue
        body = post.get("requestBody", {}).get("content", {}).get("application/json", {})
        schema = _inline_refs(body.get("schema"), components) if body.get("schema") else dict(EMPTY_SCHEMA)
        schema.pop("title", None)
        description = post.get("description") or post.get("summary") or ""
        tools[name] = ToolSpec(name=name, description=description, input_schema=schema)
    return ToolSet(tools), catch_all, skipped


def from_row(row: Mapping[str, Any]) -> list[ToolSpec]:
    """The row's function tools; InvalidToolName when one is named against the MCP rule (such a
    name would otherwise reach the upstream's request line)."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        return []
    found = []
    declared = params.get("tools") or []
    for position, tool in enumerate(declared if isinstance(declared, list) else []):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        wrapped = tool.get("function")
        fn: dict[str, Any] = wrapped if isinstance(wrapped, dict) else tool  # chat-style wrapper
        name = fn.get("name")
        problem = name_problem(name)
        if problem is not None:
            raise InvalidToolName(f"responses_create_params.tools[{position}]: {problem}")
        assert isinstance(name, str)
        parameters = fn.get("parameters")
        schema = parameters if isinstance(parameters, dict) else dict(EMPTY_SCHEMA)
        found.append(ToolSpec(name=name, description=str(fn.get("description") or ""), input_schema=schema))
    return found


def unsafe_names(names: Iterable[str], server_name: str) -> list[str]:
    """Names some client cannot accept: characters outside [A-Za-z0-9_-], or too long once prefixed."""
    prefix = len(f"mcp__{server_name}__")
    return [n for n in names if not _SAFE_NAME.fullmatch(n) or prefix + len(n) > CLIENT_NAME_LIMIT]


class ToolSets:
    """The upstream's OpenAPI tool set, plus row tool sets interned by content; ``spec`` is the
    upstream's OpenAPI document as discovery read it (the bridge's own ``/openapi.json`` is made
    from it)."""

    def __init__(
        self,
        openapi: ToolSet,
        catch_all: bool,
        sources: list[str],
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        self.openapi = openapi
        self.catch_all = catch_all
        self.sources = sources
        self.spec: Mapping[str, Any] = spec if spec is not None else {}
        self._interned: OrderedDict[bytes, ToolSet] = OrderedDict()

    def for_row(self, row_tools: list[ToolSpec]) -> ToolSet:
        """The session's tool set: the first non-empty source, given the row's tools (``from_row``)."""
        for source in self.sources:
            if source == "openapi" and self.openapi.tools:
                return self.openapi
            if source == "row" and row_tools:
                return self._intern(row_tools)
        return ToolSet({})

    def _intern(self, specs: list[ToolSpec]) -> ToolSet:
        key = hashlib.blake2b(
            exactjson.dumps([(s.name, s.description, s.input_schema) for s in specs], sort_keys=True),
            digest_size=16,
        ).digest()
        found = self._interned.get(key)
        if found is None:
            found = ToolSet({s.name: s for s in specs})
            self._interned[key] = found
            if len(self._interned) > _INTERNED_LIMIT:
                self._interned.popitem(last=False)
        else:
            self._interned.move_to_end(key)
        return found


def from_mcp_listing(entries: list[dict[str, Any]]) -> tuple[list[ToolSpec], list[str]]:
    """(tools, skipped) from an MCP ``tools/list`` result's entries (an MCP-native upstream's own
    listing); ``skipped`` says why each entry whose name breaks the MCP rule is not served."""
    found: list[ToolSpec] = []
    skipped: list[str] = []
    for tool in entries:
        name = tool.get("name")
        problem = name_problem(name)
        if problem is not None:
            skipped.append(problem)
            continue
        assert isinstance(name, str)
        schema = tool.get("inputSchema")
        found.append(
            ToolSpec(
                name=name,
                description=str(tool.get("description") or ""),
                input_schema=schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
            )
        )
    return found, skipped
