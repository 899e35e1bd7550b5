"""``/mcp``: MCP over streamable HTTP, served by the MCP Python SDK's low-level server.

Stateless with JSON responses, so any replica request can be served on its own, and every protocol
revision the SDK knows is negotiated by the SDK (the initialize handshake era and 2026-07-28).
Each request carries its rollout's session token (``X-NeMo-Gym-Session-Token``, or
``Authorization: Bearer``). ``tools/list`` lists the token's session tools, or the upstream's
OpenAPI tools without a token. ``tools/call`` authorizes the token for that tool, then
``Bridge.call_tool`` calls the upstream with the session's cookie; every refusal and every
upstream failure comes back as an ``isError`` result whose text a model can read.

Fast path. The SDK's stateless transport builds a transport, a task, memory streams and a JSON-RPC
dispatcher for every POST; for the one message a rollout sends thousands of times -- a single
well-formed ``tools/call`` -- that machinery is most of the bridge's CPU. ``McpEndpoint.post`` takes
a POST whose body the ``/mcp`` route already read and limited (``http/mcp_route.py``; Host/Origin
checked by the guards before it) and answers such a request itself; everything else goes to the
SDK (``sdk_app``) untouched: other methods,
notifications, batches, GET/DELETE, unknown protocol revisions, a duplicated or missing routing
header, ``Mcp-Param-*`` headers, an unacceptable Accept or Content-Type, an unparsable body. What
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

import logging
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

from bridge import __version__, exactjson, retries
from bridge.admission import Foreign, Rejected
from bridge.http.forwarding import Forwarding
from bridge.http.mcp_results import (
    Reply,
    Results,
    Serializer,
    accepts_json,
    call_result,
    error_answer,
    meta_valid,
    sdk_serializer,
)
from bridge.http.requests import read_body, text_headers
from bridge.service import Bridge
from bridge.tokens import Claims, from_headers, from_raw_headers

log = logging.getLogger("gym_mcp_bridge.mcp")

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
        self.fast = _FastPath.build(self)
        self.fast_calls = 0  # tools/call requests the fast path answered (tests and profiling read it)
        # An ASGI object, not a bound method: Starlette would wrap a method as a GET request handler.
        self.app: Any = _EndpointApp(self)

    async def post(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """A ``POST /mcp`` whose body was read and limited by the caller (``receive`` replays it).
        Its token is verified here, once: a request for another replica's session goes to its owner
        before anything parses its body; the verdict travels with the request (``scope``) to the
        fast path, which answers a plain ``tools/call``, or to the SDK, which answers the rest."""
        headers = dict(scope["headers"])
        token = from_raw_headers(headers)
        verdict = self._verdict(token)
        if isinstance(verdict, Foreign):
            await self.forwarding.relay(scope, body, verdict.owner, send)
            return
        if self.fast is not None and await self.fast.answer(scope, headers, body, send, verdict):
            return
        scope[_VERDICT] = (token, verdict)
        if b'"initialize"' in body and _is_initialize(body):
            send = _labelled(send)
        await self.sdk_app(scope, receive, send)

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
            raise MCPError(INVALID_SESSION, exc.reason) from exc
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
            reply = Reply(exc.reason, True)
        return call_result(reply.text, reply.is_error, reply.structured)

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
            return Reply(f"retry key refused: {exc}", True)
        try:
            session = self.bridge.admit(_claims(verdict), name)
            outcome = await self.bridge.call_tool(
                session, name, dict(arguments or {}), transport="mcp", retry=key
            )
        except Foreign:
            raise
        except Rejected as exc:
            self.bridge.metrics.rejections.labels(exc.kind).inc()
            return Reply(exc.reason, True)
        if outcome.is_error:
            return Reply(outcome.message, True)
        structured = outcome.value if isinstance(outcome.value, dict) else None
        return Reply(outcome.message, False, structured)


RetryParts = tuple[str | None, str | None, Any, Any]  # Idempotency-Key, Mcp-Session-Id, id, idempotencyKey
Verdict = Claims | Rejected  # a request's token, verified once: its claims, or the refusal it gets
_VERDICT = "gym_mcp_bridge.token"  # scope key: (token, Verdict), from ``post`` to the SDK's handlers


def _claims(verdict: Verdict) -> Claims:
    if isinstance(verdict, Rejected):
        raise verdict
    return verdict


def _latin1(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


def _is_initialize(body: bytes) -> bool:
    try:
        message = exactjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


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


# -- fast path ---------------------------------------------------------------------------------------


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


_PARAM_KEYS = frozenset({"name", "arguments", "_meta"})
_MESSAGE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_MCP_PARAM = b"\nmcp-param-"
_JSON_HEADERS = [(b"content-type", b"application/json")]
_META_CACHE_SIZE = 256


class _FastPath:
    """Answers a single well-formed ``tools/call`` POST without the SDK's per-request transport.

    Built only against the SDK release it was checked with: if the private piece it leans on
    (``mcp_results.sdk_serializer``) is missing, ``build`` returns None and the SDK serves all
    (``tests/test_architecture.py`` fails loudly when that happens)."""

    def __init__(self, endpoint: McpEndpoint, serialize: Serializer) -> None:
        from mcp_types import DEFAULT_NEGOTIATED_VERSION
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

        self.endpoint = endpoint
        self.results = Results(serialize)
        self.default_version = DEFAULT_NEGOTIATED_VERSION
        self.handshake_versions = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
        self.modern_versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        self.valid_meta: dict[bytes, bool] = {}
        self.json_media: dict[tuple[bytes, bytes], bool] = {}  # (Content-Type, Accept): both JSON?

    @classmethod
    def build(cls, endpoint: McpEndpoint) -> _FastPath | None:
        try:
            serialize = sdk_serializer(endpoint.server)
        except (ImportError, AttributeError, TypeError) as exc:  # pragma: no cover - another SDK release
            log.warning(
                "MCP fast path disabled (this MCP SDK differs from the one it was built for: %s)", exc
            )
            return None
        return cls(endpoint, serialize)

    async def answer(
        self, scope: Scope, found: dict[bytes, bytes], body: bytes, send: Send, verdict: Verdict
    ) -> bool:
        """Answer the POST when it is a plain ``tools/call`` answerable exactly as the SDK would; False
        (nothing sent) otherwise. Another replica's session raises ``Foreign`` before anything is sent."""
        headers = self._headers(scope, found)
        plan = self._plan(headers, body) if headers is not None else None
        if plan is None or headers is None:
            return False
        version, request_id, name, arguments = plan
        try:
            await self._answer(send, headers, verdict, version, request_id, name, arguments)
        except Foreign as exc:  # another replica's session: its owner answers
            await self.endpoint.forwarding.relay(scope, body, exc.owner, send)
        return True

    def _headers(self, scope: Scope, headers: dict[bytes, bytes]) -> dict[bytes, bytes] | None:
        """The request headers (``headers``: ``scope``'s as a dict), or None when one the SDK looks at
        would make it answer differently."""
        raw: list[tuple[bytes, bytes]] = scope["headers"]
        if len(headers) != len(raw):
            return None  # a repeated header: the SDK's first-or-last reading and its duplicate checks rule
        media = (headers.get(b"content-type", b""), headers.get(b"accept", b""))
        json_both = self.json_media.get(media)
        if json_both is None:  # the same few pairs on every call of a harness: judged once each
            json_both = media[0].split(b";", 1)[0].strip() == b"application/json" and accepts_json(media[1])
            if len(self.json_media) >= _META_CACHE_SIZE:
                self.json_media.clear()
            self.json_media[media] = json_both
        if not json_both:
            return None
        if _MCP_PARAM in b"\n" + b"\n".join(headers):  # a name starting mcp-param- (names hold no \n)
            return None
        return headers

    def _plan(
        self, headers: dict[bytes, bytes], body: bytes
    ) -> tuple[str, int | str, str, dict[str, Any] | None] | None:
        """(revision, request id, tool name, arguments) of a call the fast path can answer, else None."""
        try:
            message = exactjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if (
            type(message) is not dict
            or message.get("method") != "tools/call"
            or message.get("jsonrpc") != "2.0"
            or not _MESSAGE_KEYS.issuperset(message)
        ):
            return None
        request_id = message.get("id")
        if type(request_id) is not int and type(request_id) is not str:
            return None  # missing (a notification), null, bool, float ...: the SDK's answer
        params = message.get("params")
        if type(params) is not dict or not _PARAM_KEYS.issuperset(params):
            return None
        name = params.get("name")
        arguments = params.get("arguments")
        if type(name) is not str or (arguments is not None and type(arguments) is not dict):
            return None
        header_version = headers.get(b"mcp-protocol-version")
        version = self.default_version if header_version is None else header_version.decode("latin-1")
        if version in self.handshake_versions:
            if "_meta" in params:
                return None  # request _meta (progress tokens, a stray modern envelope): the SDK's
            return version, request_id, name, arguments
        if version not in self.modern_versions:
            return None
        if not self._modern_ok(headers, message, version, params):
            return None
        return version, request_id, name, arguments

    def _modern_ok(
        self, headers: dict[bytes, bytes], message: dict[str, Any], version: str, params: dict[str, Any]
    ) -> bool:
        """A 2026-07-28 request passes the SDK's inbound ladder (routing headers agree with the body,
        the envelope names this revision) and its ``_meta`` validates for ``tools/call``."""
        from mcp.shared.inbound import InboundModernRoute, classify_inbound_request

        verdict = classify_inbound_request(message, headers=text_headers(headers.items()))
        if not isinstance(verdict, InboundModernRoute) or verdict.protocol_version != version:
            return False
        meta = params.get("_meta")
        try:
            key = orjson.dumps(meta, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            return False
        valid = self.valid_meta.get(key)
        if valid is None:
            valid = meta_valid(version, meta)
            if len(self.valid_meta) >= _META_CACHE_SIZE:
                self.valid_meta.clear()
            self.valid_meta[key] = valid
        return valid

    async def _answer(
        self,
        send: Send,
        headers: dict[bytes, bytes],
        verdict: Verdict,
        version: str,
        request_id: int | str,
        name: str,
        arguments: dict[str, Any] | None,
    ) -> None:
        endpoint = self.endpoint
        endpoint.fast_calls += 1
        modern = version in self.modern_versions
        status = 200
        try:
            retry = (
                _latin1(headers.get(b"idempotency-key")),
                _latin1(headers.get(b"mcp-session-id")),
                request_id,
                None,
            )
            reply = await endpoint._call(verdict, name, arguments, retry)
            payload = self.results.encode(version, modern, request_id, reply)
        except Foreign:
            raise
        except Exception as exc:
            payload, status = error_answer(request_id, exc, modern)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload, "more_body": False})
