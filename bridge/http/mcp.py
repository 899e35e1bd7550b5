"""``/mcp``: MCP over streamable HTTP, served by the MCP Python SDK's low-level server.

Stateless with JSON responses, so any replica request can be served on its own, and every protocol
revision the SDK knows is negotiated by the SDK (the initialize handshake era and 2026-07-28).
Each request carries its rollout's session token (``X-NeMo-Gym-Session-Token``, or
``Authorization: Bearer``). ``tools/list`` lists the token's session tools, or the upstream's
OpenAPI tools without a token. ``tools/call`` authorizes the token for that tool, then
``Bridge.call_tool`` calls the upstream with the session's cookie; every refusal and every
upstream failure comes back as an ``isError`` result whose text a model can read; one the bridge
made itself names its failure in Gym's words in the result's ``_meta`` (``bridge.failures``).

Fast path. ``McpEndpoint.post`` takes a POST whose body the ``/mcp`` route already read and
limited (``http/mcp_route.py``; Host/Origin checked by the guards before it) and lets the fast path
(``http/mcp_fastpath.py`` ``FastPath``) answer a single well-formed ``tools/call`` -- the one
message a rollout sends thousands of times -- without the SDK's per-request transport; everything
else goes to the SDK (``sdk_app``) untouched: other methods,
notifications, batches, GET/DELETE, unknown protocol revisions, a duplicated or missing routing
header, ``Mcp-Param-*`` headers, an unacceptable Accept, an unparsable body; no MCP message at all
(a bad id, a batch, a non-JSON Content-Type) is refused first (``http/jsonrpc.py``). What
the fast path does answer it answers exactly as the SDK would: the same handler (``_call``), the
SDK's own result serialization for the negotiated revision (2026-07-28 adds ``resultType`` and the
``serverInfo`` ``_meta`` stamp; run once per result shape and reused as a template, see
``Results``), the same JSON-RPC envelope, encoding and status; ``tests/test_fastpath.py`` checks
the two paths answer byte for byte alike.

Another replica's session (a token that verifies but names another replica, inside the peers) is
relayed to that replica as the raw request, and its answer sent back unchanged (``forwarding``):
``McpEndpoint.post`` verifies the token first and once (``Bridge.verify_token``: for this replica's
own tokens one cached lookup), so a relayed request costs no JSON parse here; the verified claims
(or the refusal) go on with the request to ``_call``, which admits the session without verifying
the token again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge import __version__, exactjson, failures, retries
from bridge.admission import Foreign, Rejected
from bridge.http import jsonrpc, mcp_progress
from bridge.http.forwarding import Forwarding
from bridge.http.mcp_fastpath import FastPath, RetryParts, Verdict
from bridge.http.mcp_results import Reply, call_result
from bridge.http.requests import read_body
from bridge.http.responses import jsonrpc_error
from bridge.service import Bridge
from bridge.tokens import Claims, from_headers, from_raw_headers

INVALID_SESSION = -32001  # JSON-RPC server-defined error: the session token was refused


def _token(ctx: ServerRequestContext[Any]) -> str | None:
    request = ctx.request
    headers = getattr(request, "headers", None)
    return from_headers(headers, bearer=True) if headers is not None else None


class McpEndpoint:
    """``/mcp``: the MCP SDK's low-level server and streamable-HTTP manager (every method, every
    protocol era), with a fast path in front that answers a plain ``tools/call`` itself. Both end in
    ``Bridge.authorize`` and ``Bridge.call_tool``; another replica's session is relayed by
    ``forwarding``."""

    def __init__(
        self,
        bridge: Bridge,
        security: TransportSecuritySettings | None = None,
        forwarding: Forwarding | None = None,
    ) -> None:
        self.bridge = bridge
        self.forwarding = forwarding or Forwarding.of(bridge)
        self.server: Server[Any] = Server(
            "gym-mcp-bridge",
            version=__version__,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            get_tool_input_schema=lambda _name: None,
        )
        self.server.middleware = []  # no per-message OpenTelemetry span on the hot path
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            json_response=True,
            security_settings=security or TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=bridge.settings.max_body_bytes,
        )
        self.sdk_app: ASGIApp = StreamableHTTPASGIApp(self.manager)
        self.fast = FastPath.build(self)
        self.fast_calls = 0  # tools/call requests the fast path answered (tests and profiling read it)
        # An ASGI object, not a bound method: Starlette would wrap a method as a GET request handler.
        self.app: Any = _EndpointApp(self)

    async def post(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """A ``POST /mcp`` whose body was read and limited by the caller (``receive`` replays it).
        Its token is verified here, once: a request for another replica's session goes to its owner
        before anything parses its body; the verdict travels with the request (``scope``) to the
        fast path, which answers a plain ``tools/call``, or to the SDK, which answers the rest. A
        ``tools/call`` with a progress token may be answered as a progress stream (``mcp_progress``)."""
        if mcp_progress.MARK in body:
            token = mcp_progress.requested(scope["headers"], body)
            if token is not None:
                interval = self.bridge.settings.progress_interval_s

                async def answer(inner: Receive, held: Send) -> None:
                    await self._post(scope, body, inner, held)

                await mcp_progress.answer_with_progress(answer, body, token, interval, receive, send)
                return
        await self._post(scope, body, receive, send)

    async def _post(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        token = from_raw_headers(headers)
        verdict = self._verdict(token)
        if isinstance(verdict, Foreign):
            await self.forwarding.relay(scope, body, verdict.owner, send)
            return
        if self.fast is not None and await self.fast.answer(scope, headers, body, send, verdict):
            return
        if await jsonrpc.refused(headers, body, send, self.bridge.metrics.rejections):
            return  # no message MCP takes (an id the SDK would read as a notification's, a batch ...)
        scope[_VERDICT] = (token, verdict)
        if b'"initialize"' in body and _is_initialize(body):
            send = _labelled(send)
        watched = _Watched(send)
        try:
            await self.sdk_app(scope, receive, watched)
        except asyncio.CancelledError:
            if not self.bridge.drain.stopped or watched.started:
                raise
            await _answer_stopped(send, body, self.bridge.drain.stopped_reason())

    def _verdict(self, token: str | None) -> Verdict:
        """The token's verified claims, or the refusal (``Foreign``: another replica's session,
        inside the peers) a call with it gets."""
        try:
            return self.bridge.verify_token(token)
        except Rejected as exc:
            return exc

    def _sdk_verdict(self, ctx: ServerRequestContext[Any], token: str) -> Verdict:
        """The verdict ``post`` reached on this request's token, when the SDK read the same token."""
        scope = getattr(ctx.request, "scope", None)
        found = scope.get(_VERDICT) if isinstance(scope, dict) else None
        if found is not None and found[0] == token:
            verdict: Verdict = found[1]
            return verdict
        return self._verdict(token)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        token = _token(ctx)
        if token is None:
            toolsets = self.bridge.toolsets
            return types.ListToolsResult(tools=toolsets.openapi.mcp_tools() if toolsets else [])
        try:
            session = self.bridge.admit(_claims(self._sdk_verdict(ctx, token)))
        except Rejected as exc:
            self.bridge.metrics.rejections.labels(exc.kind).inc()
            raise MCPError(INVALID_SESSION, exc.reason, _failure(exc.kind, exc.reason)) from exc
        return types.ListToolsResult(tools=session.toolset.mcp_tools())

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        headers = getattr(ctx.request, "headers", None)
        retry = (
            headers.get("idempotency-key") if headers is not None else None,
            headers.get("mcp-session-id") if headers is not None else None,
            ctx.request_id,
            (ctx.params or {}).get("idempotencyKey"),
        )
        token = _token(ctx)
        verdict = self._sdk_verdict(ctx, token) if token is not None else self._verdict(None)
        try:
            reply = await self._call(verdict, params.name, params.arguments, retry)
        except Foreign as exc:  # the SDK path's pre-check forwards these; here only if it could not
            self.bridge.metrics.rejections.labels(exc.kind).inc()
            reply = Reply(exc.reason, True, meta=_failure(exc.kind, exc.reason))
        return call_result(reply.text, reply.is_error, reply.structured, reply.meta)

    async def _call(
        self, verdict: Verdict, name: str, arguments: Mapping[str, Any] | None, retry: RetryParts
    ) -> Reply:
        """``tools/call``, shared by the SDK handler and the fast path, for a token already verified
        (``verdict``). Another replica's session raises ``Foreign``: the caller relays the request
        to its owner. ``retry`` holds what names a
        retry (``bridge.retries.key_of``): the Idempotency-Key header, the Mcp-Session-Id, the
        JSON-RPC id and the ``idempotencyKey`` param."""
        header_key, mcp_session, request_id, param_key = retry
        try:
            key = retries.key_of(param_key if param_key is not None else header_key, mcp_session, request_id)
        except ValueError as exc:
            reason = f"retry key refused: {exc}"
            return Reply(reason, True, meta=_failure("retry", reason))
        try:
            session = self.bridge.admit(_claims(verdict), name)
            outcome = await self.bridge.call_tool(
                session, name, dict(arguments or {}), transport="mcp", retry=key
            )
        except Foreign:
            raise
        except Rejected as exc:
            self.bridge.metrics.rejections.labels(exc.kind).inc()
            return Reply(exc.reason, True, meta=_failure(exc.kind, exc.reason))
        if outcome.is_error:  # the upstream's own error answer carries no failure of the bridge's
            if outcome.failure is None:
                return Reply(outcome.message, True)
            self.bridge.metrics.rejections.labels(outcome.failure.name).inc()
            return Reply(outcome.message, True, meta=outcome.failure.fields())
        structured = outcome.value if isinstance(outcome.value, dict) else None
        return Reply(outcome.message, False, structured)


_VERDICT = "gym_mcp_bridge.token"  # scope key: (token, Verdict), from ``post`` to the SDK's handlers


def _failure(kind: str, reason: str) -> dict[str, Any]:
    """A refusal's failure in Gym's words: an ``isError`` result's ``_meta``, a JSON-RPC error's ``data``."""
    return failures.of(kind, reason).fields()


def _claims(verdict: Verdict) -> Claims:
    if isinstance(verdict, Rejected):
        raise verdict
    return verdict


def _is_initialize(body: bytes) -> bool:
    try:
        message = exactjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


class _Watched:
    """``send``, noting whether the answer has started."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Any) -> None:
        self.started = True
        await self.send(message)


async def _answer_stopped(send: Send, body: bytes, reason: str) -> None:
    """A request the SDK was answering when this replica stopped (uvicorn cancels what still runs):
    its session's loss as a JSON-RPC error with its id, in Gym's words, not a bare 500."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    message = exactjson.loads(body)  # a JSON-RPC request: ``jsonrpc.refused`` let it through
    payload = jsonrpc_error(200, reason, message.get("id"), INVALID_SESSION, "lost")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _labelled(send: Send) -> Send:
    """``send`` adding a fresh ``Mcp-Session-Id`` to a successful ``initialize`` answer: a label the
    client sends back on its later requests, so a repeated JSON-RPC id is told from a new call
    (``bridge.retries``). It is no state of this replica: any replica serves the session's calls."""

    async def labelled(message: Any) -> None:
        if message["type"] == "http.response.start" and message["status"] == 200:
            label = uuid.uuid4().hex.encode()
            message = {**message, "headers": [*message.get("headers", []), (b"mcp-session-id", label)]}
        await send(message)

    return labelled


class _EndpointApp:
    """``McpEndpoint.app`` as an ASGI app: a POST's body is read once (``read_body``) and handed to
    ``McpEndpoint.post``; every other request goes to the SDK. (The served app routes ``/mcp`` to
    ``McpRoute``, which also limits the body; this serves an endpoint on its own, as its tests do.)"""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.endpoint
        if scope["type"] != "http" or scope["method"] != "POST":
            await endpoint.sdk_app(scope, receive, send)
            return
        limit = endpoint.bridge.settings.max_body_bytes
        body = await read_body(receive, dict(scope["headers"]).get(b"content-length"), limit)
        if body.data is None:
            await endpoint.sdk_app(scope, body.replay, send)  # the SDK's own refusal (413, disconnect)
            return
        await endpoint.post(scope, body.data, body.replay, send)
