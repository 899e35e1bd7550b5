"""MCP-native upstreams: a resources server that serves its tools on its own MCP endpoint.

Gym's ``MCPResourcesServer`` (0.4.0; ``expose_tools_over_mcp`` later) registers ``@gym_tool``
methods as MCP tools on ``POST /mcp`` (stateless streamable HTTP, JSON answers) instead of as
``POST /<tool>`` routes, and its ``/seed_session`` answer carries ``mcp.headers`` with a per-rollout
``X-NeMo-Gym-Session-Token`` that tells the tool which Gym session it acts on. The bridge:

- ``discover``: sends ``tools/list`` to the upstream's ``/mcp`` at startup (no answer, a 404 or a
  non-JSON-RPC answer: not MCP-native, no tools) and returns the listing as it came;
- ``session_headers``: keeps the upstream's own token headers from a seed answer (the caller still
  gets the bridge's signed token and metadata in its place);
- ``call``: forwards ``tools/call`` to the upstream's ``/mcp`` with those headers and returns the
  upstream's result as the model would read it from that endpoint (text content, ``isError``,
  ``structuredContent``).

JSON-RPC is spoken directly (one POST per request; the endpoint is stateless) so the bridge's MCP
SDK major version does not have to match the upstream's.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import orjson

from bridge import exactjson
from bridge.upstream import TimeLimit, Upstream, UpstreamResponse

log = logging.getLogger("gym_mcp_bridge.upstream_mcp")

MCP_PATH = "/mcp"
SESSION_HEADER = "X-NeMo-Gym-Session-Token"
PROTOCOL_VERSION = "2025-06-18"
_ids = itertools.count(1)


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL_VERSION,
    }
    headers.update(extra or {})
    return headers


def _payload(response: UpstreamResponse) -> dict[str, Any] | None:
    """The JSON-RPC message of an answer: a JSON body, or the first ``data:`` event of an SSE one."""
    if not response.content:
        return None
    content_type = (response.content_type or "").lower()
    raw = response.content
    if "text/event-stream" in content_type:
        for line in raw.splitlines():
            if line.startswith(b"data:"):
                raw = line[5:].strip()
                break
    try:
        value = exactjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and value.get("jsonrpc") == "2.0" else None


async def _request(
    upstream: Upstream,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] | None,
    timeout: TimeLimit,
) -> tuple[UpstreamResponse, dict[str, Any] | None]:
    body = exactjson.dumps({"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params})
    response = await upstream.post(MCP_PATH, body, _headers(headers), timeout=timeout)
    return response, _payload(response)


async def discover(upstream: Upstream) -> list[dict[str, Any]]:
    """The tools the upstream lists on its own ``/mcp``, as it listed them; [] when it has no MCP
    endpoint. (The service decides which of them it serves: ``tools.from_mcp_listing``.)"""
    try:
        response, message = await _request(upstream, "tools/list", {}, None, 10.0)
    except Exception as exc:  # an upstream without the endpoint may answer anything or nothing
        log.debug("no MCP endpoint on the upstream: %s", exc)
        return []
    if response.status_code >= 400 or message is None or not isinstance(message.get("result"), dict):
        return []
    return [tool for tool in message["result"].get("tools") or [] if isinstance(tool, dict)]


def session_headers(seed_answer: Any) -> dict[str, str]:
    """The upstream's own MCP headers from its seed answer (``mcp.headers``), or {}."""
    metadata = seed_answer.get("mcp") if isinstance(seed_answer, dict) else None
    headers = metadata.get("headers") if isinstance(metadata, dict) else None
    if not isinstance(headers, dict):
        return {}
    return {
        str(k): v for k, v in headers.items() if isinstance(v, str) and k.lower() == SESSION_HEADER.lower()
    }


def result_of(response: UpstreamResponse, message: dict[str, Any] | None) -> tuple[str, bool, Any]:
    """(text a model reads, is_error, structuredContent) of a ``tools/call`` answer."""
    if message is None:
        return response.text, True, None
    error = message.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error), True, None
    result = message.get("result")
    if not isinstance(result, dict):
        return response.text, True, None
    texts = [
        part.get("text", "")
        for part in result.get("content") or []
        if isinstance(part, dict) and part.get("type") == "text"
    ]
    structured = result.get("structuredContent")
    return "".join(texts), bool(result.get("isError")), structured if isinstance(structured, dict) else None


async def call(
    upstream: Upstream,
    headers: dict[str, str],
    name: str,
    arguments: dict[str, Any],
    timeout: TimeLimit = "tool_timeout_s",
) -> tuple[UpstreamResponse, str, bool, Any]:
    """Forward one ``tools/call`` with the session's upstream token: (answer, text, is_error,
    structured). ``timeout`` as ``Upstream.post`` takes it: by default the operator's
    ``tool_timeout_s`` (unset: no limit)."""
    response, message = await _request(
        upstream, "tools/call", {"name": name, "arguments": arguments}, headers, timeout
    )
    text, is_error, structured = result_of(response, message)
    return response, text, is_error, structured
