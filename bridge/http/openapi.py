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

It also says how to reach them, for this running bridge: ``components.securitySchemes`` holds the
session token (the ``X-NeMo-Gym-Session-Token`` header, or the bridge's session cookie), optional on
the routes that act on a session (a tool, ``/verify``, ``/close_session``), and -- only when this
bridge has an ``api_key`` -- the key as HTTP Bearer and as HTTP Basic with the key as the password,
required on every route. Each operation lists every status the bridge itself answers on that route
(``ROUTE_STATUSES``, from ``responses.STATUS`` and the guards) with the refusal's schema
(``BridgeError``: ``{"detail": one line, ...}``), beside the upstream's own (its 422 validation
errors, relayed as it sends them).

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
from bridge.http.rest import BRIDGE_COOKIE, session_of
from bridge.service import Bridge
from bridge.tokens import HEADER
from bridge.tools import ToolSet, ToolSpec

# Gym's own routes the bridge serves, documented when the upstream has them
GYM_ROUTES = ("seed_session", "verify", "close_session", "aggregate_metrics")
_JSON = "application/json"
_ERROR = "BridgeError"

# Why the bridge itself answers each status (a refusal, never the upstream's answer).
STATUS_REASONS = {
    400: "malformed JSON, a body that is no JSON object or is nested past max_json_depth, a row or "
    "verify body the bridge refuses, a request it would not send upstream",
    401: "the API key missing or wrong (when this bridge has one); a session token that is invalid, "
    "expired or names no session",
    403: "a tool outside the session's allow-list; an Origin outside the allow-list (DNS rebinding)",
    404: "a tool or route neither the session nor the upstream has",
    409: "the session ended, expired or was lost in an upstream restart, or its call log is incomplete",
    413: "the body or a tool call's arguments over max_body_bytes / max_argument_bytes",
    421: "a Host outside the allow-list (DNS rebinding)",
    422: "a retry (Idempotency-Key) with other arguments; the upstream's own validation errors are "
    "relayed as it sends them",
    431: "request headers over max_header_bytes",
    502: "the upstream unreachable or failing (its detail text)",
    503: "the bridge not ready or draining, or the session cap or state budget reached (Retry-After)",
    504: "the upstream did not answer within its timeout",
}
_SESSIONLESS = {  # the same statuses on a route that reads no session token
    401: "the API key missing or wrong",
    403: "an Origin outside the allow-list (DNS rebinding)",
}
RELAYED = "any other status is the upstream's own answer, relayed as it sent it"
_EVERY_ROUTE = (400, 403, 413, 421, 431, 502, 503, 504)  # the guards, the body checks, the upstream
_SESSION = (401, 409)  # a route that acts on the session a token names
ROUTE_STATUSES: dict[str, tuple[int, ...]] = {
    "seed_session": _EVERY_ROUTE,
    "verify": (*_EVERY_ROUTE, *_SESSION),
    "close_session": (*_EVERY_ROUTE, *_SESSION),
    "aggregate_metrics": _EVERY_ROUTE,
}
TOOL_STATUSES = (*_EVERY_ROUTE, *_SESSION, 403, 404, 422)

ERROR_SCHEMA = {
    "title": _ERROR,
    "type": "object",
    "required": ["detail"],
    "properties": {
        "detail": {"type": "string", "description": "why the bridge refused, in one line"},
        "failure_kind": {"type": "string", "description": "the failure in Gym's vocabulary"},
        "failure_reason": {"type": "string"},
        "terminal": {"type": "boolean", "description": "no re-run of the rollout can succeed until fixed"},
    },
}


def security_schemes(keyed: bool) -> dict[str, Any]:
    """The session token's schemes, and the API key's when this bridge has one."""
    schemes: dict[str, Any] = {
        "sessionToken": {
            "type": "apiKey",
            "in": "header",
            "name": HEADER,
            "description": "the session's token from /seed_session (its mcp.headers)",
        },
        "sessionCookie": {
            "type": "apiKey",
            "in": "cookie",
            "name": BRIDGE_COOKIE,
            "description": "the same token as the cookie /seed_session sets",
        },
    }
    if keyed:
        schemes["apiKeyBearer"] = {
            "type": "http",
            "scheme": "bearer",
            "description": "Authorization: Bearer <api_key>",
        }
        schemes["apiKeyBasic"] = {
            "type": "http",
            "scheme": "basic",
            "description": "the api_key as the password, any user name (http://user:<api_key>@host/)",
        }
    return schemes


def _security(keyed: bool, session: bool) -> list[dict[str, list[str]]]:
    """Alternatives that satisfy a route: the key (when set) and, where a route acts on a session,
    the token optionally beside it."""
    keys: list[dict[str, list[str]]] = [{"apiKeyBearer": []}, {"apiKeyBasic": []}] if keyed else [{}]
    if not session:
        return keys
    tokens: list[dict[str, list[str]]] = [{"sessionToken": []}, {"sessionCookie": []}]
    return [{**key, **token} for key in keys for token in tokens] + keys


def _with_bridge(operation: Mapping[str, Any], name: str, keyed: bool) -> dict[str, Any]:
    """``operation`` (not changed) with the bridge's statuses and security for route ``name``."""
    gym = name in GYM_ROUTES
    statuses = ROUTE_STATUSES[name] if gym else TOOL_STATUSES
    if keyed:
        statuses = (*statuses, 401)
    session = name not in ("seed_session", "aggregate_metrics")
    bridge_error = {"$ref": f"#/components/schemas/{_ERROR}"}
    responses = dict(operation.get("responses") or {})
    for status in sorted(set(statuses)):
        reason = STATUS_REASONS[status] if session else _SESSIONLESS.get(status, STATUS_REASONS[status])
        given = responses.get(str(status))
        schema: dict[str, Any] = bridge_error
        if isinstance(given, Mapping):  # the upstream's own (FastAPI's 422): either body may come
            upstream = given.get("content", {}).get(_JSON, {}).get("schema")
            if upstream:
                schema = {"anyOf": [upstream, bridge_error]}
            reason = f"{given.get('description', '')}; or the bridge's refusal: {reason}".lstrip("; ")
        answer: dict[str, Any] = {"description": reason, "content": {_JSON: {"schema": schema}}}
        if status == 503:
            answer["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
        responses[str(status)] = answer
    responses.setdefault("default", {"description": RELAYED})
    return {**operation, "responses": responses, "security": _security(keyed, session)}


def _operation(tool: ToolSpec) -> dict[str, Any]:
    """A POST operation for a tool the upstream does not document (a row's own tool)."""
    return {
        "summary": tool.name,
        "description": tool.description,
        "operationId": tool.name,
        "requestBody": {"required": True, "content": {_JSON: {"schema": tool.input_schema}}},
        "responses": {"200": {"description": "Successful Response", "content": {_JSON: {"schema": {}}}}},
    }


def document(spec: Mapping[str, Any], tools: ToolSet, keyed: bool = False) -> dict[str, Any]:
    """The bridge's OpenAPI document: ``spec``'s path items for ``tools`` and Gym's routes, in the
    upstream's order, then an operation for each tool ``spec`` does not document; each with the
    bridge's statuses and security (``keyed``: this bridge has an ``api_key``)."""
    upstream_paths = spec.get("paths")
    upstream_paths = upstream_paths if isinstance(upstream_paths, Mapping) else {}
    paths: dict[str, Any] = {}
    for path, item in upstream_paths.items():
        post = item.get("post") if isinstance(item, Mapping) else None
        name = path.strip("/") if isinstance(path, str) else ""
        if isinstance(post, Mapping) and (name in tools.tools or name in GYM_ROUTES):
            paths[path] = {"post": _with_bridge(post, name, keyed)}
    for name, tool in tools.tools.items():
        if f"/{name}" not in paths:
            paths[f"/{name}"] = {"post": _with_bridge(_operation(tool), name, keyed)}
    given = spec.get("components")
    components = dict(given) if isinstance(given, Mapping) else {}
    components["schemas"] = {**(components.get("schemas") or {}), _ERROR: ERROR_SCHEMA}
    components["securitySchemes"] = {**(components.get("securitySchemes") or {}), **security_schemes(keyed)}
    return {
        "openapi": spec.get("openapi", "3.1.0"),
        "info": spec.get("info") or {"title": "gym-mcp-bridge", "version": "0"},
        "paths": paths,
        "components": components,
    }


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
        made = document(toolsets.spec, tools, keyed=key is not None)
        if session is None:
            self._cached = (tools, made)
        return json_response(made)

    def _refused(self, exc: Rejected) -> Response:
        self.bridge.metrics.rejections.labels(exc.kind).inc()
        return refusal(exc)
