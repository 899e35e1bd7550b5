"""``GET /openapi.json``: the bridge's Gym-compatible surface described as Gym describes its own.

A Gym resources server is a FastAPI app, and Gym's OpenAPI-driven clients (NeMo Evaluator's
``HttpToolBackend``, which lists a resources server's tools from this document) read its
``/openapi.json``: every ``POST /<name>`` that is not one of Gym's own routes is a tool. This module
answers that document for the bridge, made from the upstream's own (kept by discovery on
``ToolSets.spec``), so such a client lists the same tools, with the same request schemas, as it does
against the upstream alone:

- the upstream's path items, in its order, for every route the bridge serves on the REST surface:
  the tool routes and ``/seed_session``, ``/verify``, ``/close_session``, ``/aggregate_metrics``
  where the upstream has them; its ``components`` (the ``$ref`` targets) and ``info`` as they are;
- for a request that names a session (the token header or the bridge's cookie), the tool routes
  are that session's tool set: the upstream's operation for a tool it documents, else one made
  from the tool's schema (a row's own tool).

The document is guarded like the rest of the REST surface: the API key when one is set, 503 while
the bridge is not ready, a bad session token refused as on ``/verify``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bridge.admission import Foreign, Rejected
from bridge.http import auth
from bridge.http.responses import json_response, refusal
from bridge.http.rest import session_of
from bridge.service import Bridge
from bridge.tools import ToolSet, ToolSpec

# Gym's own routes the bridge serves, documented when the upstream has them
GYM_ROUTES = ("seed_session", "verify", "close_session", "aggregate_metrics")
_JSON = "application/json"


def _operation(tool: ToolSpec) -> dict[str, Any]:
    """A POST operation for a tool the upstream does not document (a row's own tool)."""
    return {
        "summary": tool.name,
        "description": tool.description,
        "operationId": tool.name,
        "requestBody": {"required": True, "content": {_JSON: {"schema": tool.input_schema}}},
        "responses": {"200": {"description": "Successful Response", "content": {_JSON: {"schema": {}}}}},
    }


def document(spec: Mapping[str, Any], tools: ToolSet) -> dict[str, Any]:
    """The bridge's OpenAPI document: ``spec``'s path items for ``tools`` and Gym's routes, in the
    upstream's order, then an operation for each tool ``spec`` does not document."""
    upstream_paths = spec.get("paths")
    upstream_paths = upstream_paths if isinstance(upstream_paths, Mapping) else {}
    paths: dict[str, Any] = {}
    for path, item in upstream_paths.items():
        post = item.get("post") if isinstance(item, Mapping) else None
        name = path.strip("/") if isinstance(path, str) else ""
        if isinstance(post, Mapping) and (name in tools.tools or name in GYM_ROUTES):
            paths[path] = {"post": post}
    for name, tool in tools.tools.items():
        if f"/{name}" not in paths:
            paths[f"/{name}"] = {"post": _operation(tool)}
    out: dict[str, Any] = {
        "openapi": spec.get("openapi", "3.1.0"),
        "info": spec.get("info") or {"title": "gym-mcp-bridge", "version": "0"},
        "paths": paths,
    }
    if isinstance(spec.get("components"), Mapping):
        out["components"] = spec["components"]
    return out


class OpenApiDocument:
    """The ``GET /openapi.json`` endpoint; the session-less document is made once per tool set."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self._cached: tuple[ToolSet, dict[str, Any]] | None = None

    async def get(self, request: Request) -> Response:
        key = self.bridge.settings.api_key
        if key is not None and not auth.api_key_accepted(
            request.headers.get("authorization"), key.get_secret_value()
        ):
            return self._refused(Rejected(auth.REFUSAL, "api_key"))
        reason = self.bridge.not_ready_reason()
        toolsets = self.bridge.toolsets
        if reason is not None or toolsets is None:
            return self._refused(
                Rejected(
                    f"bridge not ready: {(reason or 'starting').splitlines()[0]}", "not_ready", retry_after=2
                )
            )
        tools = toolsets.openapi
        try:
            session = session_of(self.bridge, request)
        except Foreign:  # another replica's session: its tools are the upstream's, as listed here
            session = None
        except Rejected as exc:
            return self._refused(exc)
        if session is not None:
            tools = session.toolset
        if session is None and self._cached is not None and self._cached[0] is tools:
            return json_response(self._cached[1])
        made = document(toolsets.spec, tools)
        if session is None:
            self._cached = (tools, made)
        return json_response(made)

    def _refused(self, exc: Rejected) -> Response:
        self.bridge.metrics.rejections.labels(exc.kind).inc()
        return refusal(exc)
