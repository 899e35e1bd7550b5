"""What a ``tools/call`` answers, put on the wire exactly as the MCP SDK puts it.

``McpEndpoint._call`` turns an upstream outcome or a refusal into a ``Reply`` (text, error flag,
structured object). The SDK path wraps it with ``call_result``; the fast path (``bridge.http.mcp_fastpath``)
hands it to ``Results``, which serializes it the SDK's way for the negotiated revision, and to the
envelope and error helpers below, which encode and status the JSON-RPC answer as the SDK's
transports do. ``tests/test_fastpath.py`` checks both paths answer byte for byte alike.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import pydantic_core

log = logging.getLogger("gym_mcp_bridge.mcp")


@dataclass(frozen=True, slots=True)
class Reply:
    """What a ``tools/call`` answers: the text a model reads, whether it is an error, and the
    upstream's JSON object (``structuredContent``) when it answered one. A failure of the bridge's
    own making (a refusal, an upstream it could not reach) names itself in Gym's words in the
    result's ``_meta`` (``meta``: ``failure_kind``, ``failure_reason``, ``terminal``); the text
    stays the one line a model reads."""

    text: str
    is_error: bool
    structured: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


def call_result(
    text: str, is_error: bool, structured: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
) -> types.CallToolResult:
    content: list[types.ContentBlock] = [types.TextContent(type="text", text=text)]
    if meta is None:  # unset, not None: the wire has no "_meta" key then
        return types.CallToolResult(content=content, is_error=is_error, structured_content=structured)
    return types.CallToolResult(content=content, is_error=is_error, structured_content=structured, _meta=meta)


Serializer = Callable[[str, str, Any], dict[str, Any]]  # (method, revision, result) -> the wire's dict


def sdk_serializer(server: Any) -> Serializer:
    """The SDK's own result serializer for ``server`` (a low-level ``Server``).

    The one private SDK name the bridge uses: the SDK has no public function that puts a handler's
    result on the wire for a revision (``ServerRunner._serialize``: surface validation, ``resultType``
    and the ``serverInfo`` stamp on 2026-07-28). ImportError, AttributeError or TypeError when an SDK
    release changed it (the fast path is then off); ``tests/test_architecture.py`` fails loudly then."""
    from mcp.server.connection import Connection
    from mcp.server.runner import ServerRunner

    runner = ServerRunner(server, Connection.from_envelope("2025-03-26", None, None), None)
    serialize: Serializer = runner._serialize
    return serialize


_TEXT_MARK = "\x00gym-mcp-bridge text\x00"
_STRUCTURED_MARK: dict[str, Any] = {"\x00gym-mcp-bridge structured\x00": True}
_MISSING: Any = object()


class Results:
    """``tools/call`` results as the SDK puts them on the wire, without a pydantic round trip per call.

    The SDK's result serializer (``ServerRunner._serialize``: surface validation for the revision,
    ``resultType`` and the ``serverInfo`` stamp on 2026-07-28) runs once per (revision, isError,
    structured or not) on a result holding markers; each call copies that template with its own
    text and structured object in the markers' places. A template whose markers did not come back
    exactly where expected is refused, and those calls go through the serializer itself. The
    envelope is encoded as the SDK's transport does: pydantic-core's JSON on the handshake wire,
    ``json.dumps`` on the 2026-07-28 wire."""

    def __init__(self, serialize: Serializer) -> None:
        self.serialize = serialize
        self.templates: dict[tuple[str, bool, bool], dict[str, Any] | None] = {}

    def result(self, version: str, reply: Reply) -> dict[str, Any]:
        if reply.meta is not None:  # a failure named in _meta: rare, so the serializer itself
            return self.serialize(
                "tools/call", version, call_result(reply.text, reply.is_error, reply.structured, reply.meta)
            )
        key = (version, reply.is_error, reply.structured is not None)
        template = self.templates.get(key, _MISSING)
        if template is _MISSING:
            template = self.templates[key] = self._template(*key)
        if template is None:
            return self.serialize(
                "tools/call", version, call_result(reply.text, reply.is_error, reply.structured)
            )
        result = dict(template)
        result["content"] = [{**template["content"][0], "text": reply.text}]
        if reply.structured is not None:
            result["structuredContent"] = reply.structured
        return result

    def encode(self, version: str, modern: bool, request_id: int | str, reply: Reply) -> bytes:
        return envelope_bytes(
            {"jsonrpc": "2.0", "id": request_id, "result": self.result(version, reply)}, modern
        )

    def _template(self, version: str, is_error: bool, structured: bool) -> dict[str, Any] | None:
        marked = call_result(_TEXT_MARK, is_error, _STRUCTURED_MARK if structured else None)
        template = self.serialize("tools/call", version, marked)
        content = template.get("content")
        fits = (
            isinstance(content, list)
            and len(content) == 1
            and content[0] == {"type": "text", "text": _TEXT_MARK}
            and (template.get("structuredContent") == _STRUCTURED_MARK) is structured
            and (structured or "structuredContent" not in template)
            and _TEXT_MARK not in json.dumps({k: v for k, v in template.items() if k != "content"})
        )
        if not fits:
            log.warning("tools/call results for %s go through the SDK serializer (unexpected shape)", version)
            return None
        return template


def error_answer(request_id: int | str, exc: Exception, modern: bool) -> tuple[bytes, int]:
    """The body and status the SDK sends when the handler raises (rare: ``_call`` renders every
    refusal and upstream failure as a result)."""
    from mcp_types import JSONRPCError

    message = JSONRPCError(jsonrpc="2.0", id=request_id, error=_error_data(exc, modern))
    if not modern:
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode(), 200
    from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS

    dumped = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    return envelope_bytes(dumped, modern), ERROR_CODE_HTTP_STATUS.get(message.error.code, 200)


def envelope_bytes(message: dict[str, Any], modern: bool) -> bytes:
    """A JSON-RPC message as the SDK's transports encode it: its modern single-exchange writer
    (``_streamable_http_modern._write``) uses ``json.dumps``; its stateless JSON-response transport
    (``_create_json_response``) pydantic's JSON, which pydantic-core's ``to_json`` is."""
    if modern:
        return json.dumps(message, separators=(",", ":")).encode()
    return pydantic_core.to_json(message)


def accepts_json(accept: bytes) -> bool:
    """``check_accept_headers``'s JSON half (RFC 7231 wildcards), as the SDK reads Accept."""
    for media_type in accept.decode("latin-1").split(","):
        kind = media_type.strip().split(";")[0].strip().lower()
        if kind in ("*/*", "application/json", "application/*"):
            return True
    return False


def meta_valid(version: str, meta: Any) -> bool:
    from mcp_types import methods
    from pydantic import ValidationError

    try:
        methods.validate_client_request("tools/call", version, {"name": "x", "arguments": {}, "_meta": meta})
    except (ValidationError, KeyError, ValueError):
        return False
    return True


def _error_data(exc: Exception, modern: bool) -> Any:
    """The JSON-RPC error the SDK sends when the handler raises: its modern entry maps through
    ``modern_error_data``; its handshake-era dispatcher keeps ``code=0`` with the exception text."""
    from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
    from mcp_types import ErrorData

    if modern:
        from mcp.server.runner import modern_error_data

        return modern_error_data(exc)
    error = handler_exception_to_error_data(exc)
    if error is None:
        log.exception("handler for 'tools/call' raised")
        error = ErrorData(code=0, message=str(exc))
    return error
