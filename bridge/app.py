"""The ASGI application: routes of both surfaces, health and metrics, error rendering, lifespan.

``create_app(bridge)`` expects a started ``Bridge`` (``serving.ServingApp`` starts it behind the
probes, then builds this app and runs its ``lifespan``). The lifespan runs the MCP session
manager, the session sweeper and, in managed mode, the upstream supervisor; on shutdown (after
uvicorn has drained in-flight requests) it stops the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
from mcp.server.transport_security import TransportSecuritySettings
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge import tracing
from bridge.core import Bridge
from bridge.health import Health
from bridge.mcp_endpoint import McpEndpoint, host_allowed
from bridge.responses import error, json_too_deep_async
from bridge.rest import RestSurface
from bridge.settings import Settings

log = logging.getLogger("gym_mcp_bridge")

PROBE_PATHS = frozenset({"/healthz", "/readyz"})  # kubelet probes send the pod IP as Host


def rebinding_protection(
    settings: Settings, bound_host: str, advertise_url: str
) -> TransportSecuritySettings:
    """DNS-rebinding protection (Host/Origin allow-lists) as the MCP SDK's settings, on everywhere.

    The allow-list is the loopback names, the bound host (unless a wildcard) and the advertise URL's
    host, each on any port, plus ``allowed_hosts`` ('*' there turns the check off). A bridge in a
    container behind ``-p 127.0.0.1:8000:8000`` is still reached as ``localhost``/``127.0.0.1``;
    a name it is served under besides those (a Kubernetes Service, a LAN address) goes in
    ``allowed_hosts``. Origins default to ``http(s)://`` + each allowed host."""
    extra = settings.allowed_hosts or []
    if "*" in extra:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = {"127.0.0.1", "localhost", "[::1]"}
    if bound_host not in ("0.0.0.0", "::", ""):
        names.add(f"[{bound_host}]" if ":" in bound_host else bound_host)
    advertised = urlsplit(advertise_url).hostname
    if advertised:
        names.add(f"[{advertised}]" if ":" in advertised else advertised)
    hosts = sorted({*names, *(f"{n}:*" for n in names), *extra})
    origins = settings.allowed_origins
    if origins is None:
        origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=list(hosts), allowed_origins=list(origins)
    )


class Guard:
    """Request limits and Host/Origin checks, before any route runs (pure ASGI).

    Every request: total header size (431). REST routes: Host/Origin against the rebinding
    allow-lists (``/mcp`` gets the same check from the MCP SDK; probes are exempt). ``POST /mcp``:
    body size (413), JSON depth (400) and tool-call argument size (413), each answered as a
    JSON-RPC error; the REST surface checks the same limits as it reads its body. A ``POST /mcp``
    that passes goes straight to the MCP endpoint (``mcp``), not through Starlette's routing and
    middleware, which the one request a rollout sends thousands of times has no use for."""

    def __init__(
        self, app: ASGIApp, mcp: ASGIApp, bridge: Bridge, security: TransportSecuritySettings
    ) -> None:
        self.app = app
        self.mcp = mcp
        self.bridge = bridge
        self.settings = bridge.settings
        self.security = security
        # the app's lifespan (MCP session manager, sweeper, supervisor); the server runs it
        self.lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]] = contextlib.nullcontext

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = self.settings
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        size = sum(len(k) + len(v) + 4 for k, v in headers)
        path: str = scope["path"]
        mcp = path == "/mcp"
        if size > settings.max_header_bytes:
            reason = f"request headers too large ({size} bytes, limit {settings.max_header_bytes}; max_header_bytes)"
            await self._refuse(scope, receive, send, 431, reason, "header_size", mcp)
            return
        if self.security.enable_dns_rebinding_protection and not mcp and path not in PROBE_PATHS:
            found = dict(headers)
            host = found.get(b"host", b"").decode("latin-1")
            origin = found.get(b"origin", b"").decode("latin-1")
            if not host_allowed(host, self.security.allowed_hosts):
                await self._refuse(
                    scope, receive, send, 421, f"Host {host!r} not allowed (allowed_hosts)", "host", False
                )
                return
            if origin and not host_allowed(origin, self.security.allowed_origins):
                await self._refuse(
                    scope,
                    receive,
                    send,
                    403,
                    f"Origin {origin!r} not allowed (allowed_origins)",
                    "origin",
                    False,
                )
                return
        if mcp and scope["method"] == "POST":
            await self._mcp_post(scope, receive, send)
            return
        if tracing.ENABLED and path not in PROBE_PATHS and path != "/metrics":
            parent = tracing.parent_from(_text_headers(headers))
            with tracing.span(f"{scope['method']} {path}", SpanKind.SERVER, parent, **{"url.path": path}):
                await self.app(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _mcp_post(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = self.settings
        chunks: list[bytes] = []
        size = 0
        pending: deque[Message] = deque()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                pending.append(message)
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > settings.max_body_bytes:
                reason = f"request body too large (over {settings.max_body_bytes} bytes; max_body_bytes)"
                await self._refuse(scope, receive, send, 413, reason, "body_size", True)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if await json_too_deep_async(body, settings.max_json_depth):
            reason = f"JSON body nested too deeply (limit {settings.max_json_depth} levels; max_json_depth)"
            await self._refuse(scope, receive, send, 400, reason, "json_depth", True)
            return
        if size > settings.max_argument_bytes:
            arguments = _call_arguments(body)
            if arguments is not None and len(arguments) > settings.max_argument_bytes:
                reason = (
                    f"tool arguments too large ({len(arguments)} bytes, limit "
                    f"{settings.max_argument_bytes}; max_argument_bytes)"
                )
                await self._refuse(scope, receive, send, 413, reason, "argument_size", True)
                return
        pending.appendleft({"type": "http.request", "body": body, "more_body": False})

        async def replay() -> Message:
            return pending.popleft() if pending else await receive()

        try:
            if tracing.ENABLED:
                method, tool, meta = _rpc_summary(body)
                parent = tracing.parent_from(_text_headers(scope["headers"]), meta)
                attributes = {"mcp.method.name": method, "gym.tool": tool}
                with tracing.span(f"mcp {method}", SpanKind.SERVER, parent, **attributes):
                    await self.mcp(scope, replay, send)
            else:
                await self.mcp(scope, replay, send)
        except Exception as exc:  # what Starlette's error middleware would do for any other route
            log.exception("unhandled error on POST /mcp")
            reason = f"internal error ({type(exc).__name__}); see the bridge log"
            with contextlib.suppress(Exception):  # the response may have started already
                await _answer_error(scope, receive, send, 500, reason, jsonrpc=True)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, reason: str, kind: str, jsonrpc: bool
    ) -> None:
        self.bridge.metrics.rejections.labels(kind).inc()
        await _answer_error(scope, receive, send, status, reason, jsonrpc)


async def _answer_error(
    scope: Scope, receive: Receive, send: Send, status: int, reason: str, jsonrpc: bool
) -> None:
    """A one-line refusal: a JSON-RPC error on ``/mcp``, else ``{"detail": reason}``."""
    if jsonrpc:
        code = -32603 if status >= 500 else -32600  # JSON-RPC internal error / invalid request
        payload = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": reason}}
        response: Response = Response(
            orjson.dumps(payload), status_code=status, media_type="application/json"
        )
    else:
        response = error(status, reason)
    await response(scope, receive, send)


def _text_headers(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}


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


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error(404, f"no route {request.method} {request.url.path}")
    if exc.status_code == 405:
        return error(405, f"method {request.method} not allowed on {request.url.path}")
    return error(exc.status_code, str(exc.detail))


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error(500, f"internal error ({type(exc).__name__}); see the bridge log")


def create_app(bridge: Bridge) -> Guard:
    security = rebinding_protection(bridge.settings, str(bridge.bound[0]), bridge.advertise_url)
    mcp = McpEndpoint(bridge, security=security)
    mcp.server.name = bridge.upstream.server_name
    health = Health(bridge)

    async def metrics(request: Request) -> Response:
        return Response(bridge.metrics.render(), media_type="text/plain; version=0.0.4")

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        tasks = [asyncio.create_task(bridge.sweep_forever())]
        if bridge.upstream.mode == "managed":
            tasks.append(asyncio.create_task(bridge.upstream.supervise()))
        try:
            async with mcp.manager.run():
                yield
        finally:
            for task in tasks:
                task.cancel()
            await bridge.forwarding.aclose()
            await bridge.upstream.stop()

    routes = [
        Route("/healthz", health.healthz, methods=["GET"]),
        Route("/readyz", health.readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/mcp", mcp.app),
        *RestSurface(bridge).routes(),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _server_error})
    guard = Guard(app, mcp.app, bridge, security)
    guard.lifespan = lifespan
    return guard
