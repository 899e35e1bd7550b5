"""``/mcp`` as routed: what Starlette's routing hands every ``/mcp`` request to, once the guards
(``http/guard.py``) have passed it.

``POST``: optional whitespace around header values is trimmed (``jsonrpc.trim_header_values``),
the body is read here, once (``read_body``), and its size (413, ``max_body_bytes``), JSON
depth (400, ``max_json_depth``) and tool-call argument size (413, ``max_argument_bytes``) checked,
each refusal a JSON-RPC error; the REST surface checks the same limits as it reads its body. The
bytes go on to ``McpEndpoint.post`` (the fast path, forwarding or the SDK) inside the request's
trace span, and an unexpected error becomes a JSON-RPC 500 with a one-line reason. ``GET``: 405,
the spec's answer of an endpoint with no server-initiated stream. Anything else (``DELETE``) goes to
the SDK.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import orjson
from opentelemetry.trace import SpanKind
from prometheus_client import Counter
from starlette.types import Receive, Scope, Send

from bridge import tracing
from bridge.http.guard import answer_error, refuse, request_span, rollout_attribute
from bridge.http.jsonrpc import trim_header_values
from bridge.http.mcp import McpEndpoint
from bridge.http.requests import (
    arguments_too_large,
    body_too_large,
    json_too_deep_async,
    read_body,
    text_headers,
)
from bridge.http.responses import error
from bridge.settings import Settings

log = logging.getLogger("gym_mcp_bridge")

GET_REFUSED = "method GET not allowed on /mcp: this endpoint sends no server-initiated messages (POST only)"


class McpRoute:
    """The ``/mcp`` route's ASGI app (see the module docstring)."""

    def __init__(self, endpoint: McpEndpoint, settings: Settings, rejections: Counter) -> None:
        self.endpoint = endpoint
        self.settings = settings
        self.rejections = rejections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await self._other(scope, receive, send)
            return
        trim_header_values(scope)  # RFC 9110: whitespace around a value is no part of it (Mcp-Name ...)
        settings = self.settings
        content_length = None
        for key, value in scope["headers"]:  # the last one, as a dict of them would keep
            if key == b"content-length":
                content_length = value
        body = await read_body(receive, content_length, settings.max_body_bytes)
        if body.too_large:
            reason = body_too_large(settings.max_body_bytes)
            await refuse(scope, receive, send, 413, reason, "body_size", self.rejections)
            return
        if body.data is None:
            return  # the client went away before its body arrived
        data = body.data
        if await json_too_deep_async(data, settings.max_json_depth):
            reason = f"JSON body nested too deeply (limit {settings.max_json_depth} levels; max_json_depth)"
            await refuse(scope, receive, send, 400, reason, "json_depth", self.rejections)
            return
        if len(data) > settings.max_argument_bytes:
            arguments = _call_arguments(data)
            too_large = arguments_too_large(len(arguments or b""), settings.max_argument_bytes)
            if too_large is not None:
                await refuse(scope, receive, send, 413, too_large, "argument_size", self.rejections)
                return
        try:
            if tracing.ENABLED:
                method, tool, meta = _rpc_summary(data)
                parent = tracing.parent_from(text_headers(scope["headers"]), meta)
                attributes = {"mcp.method.name": method, "gym.tool": tool, **rollout_attribute(scope)}
                with tracing.span(f"mcp {method}", SpanKind.SERVER, parent, **attributes):
                    await self.endpoint.post(scope, data, body.replay, send)
            else:
                await self.endpoint.post(scope, data, body.replay, send)
        except Exception as exc:  # what Starlette's error middleware would do for any other route
            log.exception("unhandled error on POST /mcp")
            reason = f"internal error ({type(exc).__name__}); see the bridge log"
            with contextlib.suppress(Exception):  # the response may have started already
                await answer_error(scope, receive, send, 500, reason)

    async def _other(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        if method == "GET":
            # A client given an Mcp-Session-Id opens this stream after initialize: held open, it would
            # cost a connection and a task per harness for the whole rollout; refused, the client gives
            # up after two tries.
            await answer_error(scope, receive, send, 405, GET_REFUSED)
            return
        try:
            if tracing.ENABLED:
                with request_span(scope):
                    await self.endpoint.sdk_app(scope, receive, send)
            else:
                await self.endpoint.sdk_app(scope, receive, send)
        except Exception as exc:  # as the REST app's error handler renders it
            log.exception("unhandled error on %s /mcp", method)
            reason = f"internal error ({type(exc).__name__}); see the bridge log"
            await error(500, reason)(scope, receive, send)


def _rpc_summary(body: bytes) -> tuple[str, str | None, Any]:
    """(method, tool name, params._meta) of a JSON-RPC request body, for its span."""
    try:
        message: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "invalid", None, None
    if not isinstance(message, dict):
        return "batch" if isinstance(message, list) else "invalid", None, None
    params = message.get("params")
    if not isinstance(params, dict):
        return str(message.get("method")), None, None
    tool = params.get("name") if isinstance(params.get("name"), str) else None
    return str(message.get("method")), tool, params.get("_meta")


def _call_arguments(body: bytes) -> bytes | None:
    """The serialized ``arguments`` of a JSON-RPC ``tools/call`` (or of any in a batch), else None."""
    try:
        value: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    largest: bytes | None = None
    for message in value if isinstance(value, list) else [value]:
        params = message.get("params") if isinstance(message, dict) else None
        if isinstance(params, dict) and message.get("method") == "tools/call":
            try:
                encoded = orjson.dumps(params.get("arguments"))
            except orjson.JSONEncodeError:
                continue
            if largest is None or len(encoded) > len(largest):
                largest = encoded
    return largest
