"""The guard in front of every route: request limits and the DNS-rebinding Host/Origin check.

``rebinding_protection`` builds the allow-lists from the settings; ``Guard`` (pure ASGI, knows
nothing of the routes behind it but ``/mcp``, the probes and ``/metrics``) refuses what breaks a limit or the
allow-lists, reads each ``POST /mcp`` body once and hands it to the MCP endpoint, and opens the
request's trace span.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import orjson
from mcp.server.transport_security import TransportSecuritySettings
from opentelemetry.trace import SpanKind
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge import rollouts, tracing
from bridge.http import prefixes
from bridge.http.mcp import McpEndpoint
from bridge.http.requests import (
    arguments_too_large,
    body_too_large,
    json_too_deep_async,
    read_body,
    text_headers,
)
from bridge.http.responses import error
from bridge.service import Bridge
from bridge.settings import Settings

log = logging.getLogger("gym_mcp_bridge")

GET_REFUSED = "method GET not allowed on /mcp: this endpoint sends no server-initiated messages (POST only)"
PROBE_PATHS = frozenset({"/healthz", "/health", "/readyz"})  # kubelet probes send the pod IP as Host


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


class AllowList:
    """Host or Origin values against an allow-list whose ``name:*`` entries admit ``name:`` and any
    port (the MCP SDK's rule), checked on every request: one set lookup, one ``startswith``."""

    __slots__ = ("exact", "ports_of")

    def __init__(self, entries: Iterable[str]) -> None:
        entries = list(entries)
        self.exact = frozenset(entries)
        self.ports_of = tuple(entry[:-1] for entry in entries if entry.endswith(":*"))

    def __contains__(self, value: str) -> bool:
        return value in self.exact or value.startswith(self.ports_of)


def rebinding_refusal(
    headers: dict[bytes, bytes], hosts: AllowList, origins: AllowList
) -> tuple[int, str, str] | None:
    """(status, reason, kind) when the Host (421) or Origin (403) is outside the allow-lists."""
    host = headers.get(b"host", b"").decode("latin-1")
    if host not in hosts:
        return 421, f"Host {host!r} not allowed (allowed_hosts)", "host"
    origin = headers.get(b"origin", b"").decode("latin-1")
    if origin and origin not in origins:
        return 403, f"Origin {origin!r} not allowed (allowed_origins)", "origin"
    return None


class Guard:
    """Request limits and Host/Origin checks, before any route runs (pure ASGI).

    Every request: total header size (431), then Host/Origin against the rebinding allow-lists
    (421/403; probes are exempt). ``POST /mcp``: its body is read here, once (``read_body``), and
    its size (413), JSON depth (400) and tool-call argument size (413) checked, each refusal a
    JSON-RPC error; the REST surface checks the same limits as it reads its body. A ``POST /mcp``
    that passes goes with its body straight to ``McpEndpoint.post``, not through Starlette's
    routing and middleware, which the one request a rollout sends thousands of times has no use
    for."""

    def __init__(
        self, app: ASGIApp, mcp: McpEndpoint, bridge: Bridge, security: TransportSecuritySettings
    ) -> None:
        self.app = app
        self.mcp = mcp
        self.bridge = bridge
        self.settings = bridge.settings
        self.rebinding = security.enable_dns_rebinding_protection
        self.hosts = AllowList(security.allowed_hosts or [])
        self.origins = AllowList(security.allowed_origins or [])
        self.mount = prefixes.mount_path(bridge.advertise_url)  # served under a path: advertise_url's
        # the app's lifespan (MCP session manager, sweeper, supervisor); the server runs it
        self.lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]] = contextlib.nullcontext

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = self.settings
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        size = sum(len(k) + len(v) + 4 for k, v in headers)
        scope, bad_prefix = prefixes.strip(scope, self.mount)
        path: str = scope["path"]
        mcp = path == "/mcp"
        if size > settings.max_header_bytes:
            reason = f"request headers too large ({size} bytes, limit {settings.max_header_bytes}; max_header_bytes)"
            await self._refuse(scope, receive, send, 431, reason, "header_size", mcp)
            return
        if bad_prefix is not None:
            await self._refuse(scope, receive, send, 404, bad_prefix, "rollout_id", False)
            return
        found = dict(headers)
        if self.rebinding and path not in PROBE_PATHS:
            refused = rebinding_refusal(found, self.hosts, self.origins)
            if refused is not None:
                await self._refuse(scope, receive, send, *refused, mcp)
                return
        if mcp and scope["method"] == "POST":
            await self._mcp_post(scope, receive, send, found.get(b"content-length"))
            return
        if mcp and scope["method"] == "GET":
            # The spec's answer of an endpoint with no server-to-client stream. A client given an
            # Mcp-Session-Id opens this stream after initialize: held open, it would cost a connection
            # and a task per harness for the whole rollout; refused, the client gives up after two tries.
            await _answer_error(scope, receive, send, 405, GET_REFUSED, jsonrpc=True)
            return
        if tracing.ENABLED and path not in PROBE_PATHS and path != "/metrics":
            parent = tracing.parent_from(text_headers(headers))
            attributes = {"url.path": path, **_rollout_attribute(scope)}
            with tracing.span(f"{scope['method']} {path}", SpanKind.SERVER, parent, **attributes):
                await self.app(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _mcp_post(
        self, scope: Scope, receive: Receive, send: Send, content_length: bytes | None
    ) -> None:
        settings = self.settings
        body = await read_body(receive, content_length, settings.max_body_bytes)
        if body.too_large:
            await self._refuse(
                scope, receive, send, 413, body_too_large(settings.max_body_bytes), "body_size", True
            )
            return
        if body.data is None:
            return  # the client went away before its body arrived
        data = body.data
        if await json_too_deep_async(data, settings.max_json_depth):
            reason = f"JSON body nested too deeply (limit {settings.max_json_depth} levels; max_json_depth)"
            await self._refuse(scope, receive, send, 400, reason, "json_depth", True)
            return
        if len(data) > settings.max_argument_bytes:
            arguments = _call_arguments(data)
            too_large = arguments_too_large(len(arguments or b""), settings.max_argument_bytes)
            if too_large is not None:
                await self._refuse(scope, receive, send, 413, too_large, "argument_size", True)
                return
        try:
            if tracing.ENABLED:
                method, tool, meta = _rpc_summary(data)
                parent = tracing.parent_from(text_headers(scope["headers"]), meta)
                attributes = {"mcp.method.name": method, "gym.tool": tool, **_rollout_attribute(scope)}
                with tracing.span(f"mcp {method}", SpanKind.SERVER, parent, **attributes):
                    await self.mcp.post(scope, data, body.replay, send)
            else:
                await self.mcp.post(scope, data, body.replay, send)
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
        allow = {"allow": "POST, DELETE"} if status == 405 else None
        response: Response = Response(
            orjson.dumps(payload), status_code=status, media_type="application/json", headers=allow
        )
    else:
        response = error(status, reason)
    await response(scope, receive, send)


def _rollout_attribute(scope: Scope) -> dict[str, str]:
    found = prefixes.rollout_id(scope)
    return {"gym.rollout_id": rollouts.label(found)} if found is not None else {}


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
