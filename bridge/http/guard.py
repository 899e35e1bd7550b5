"""The guards in front of every route, each a small pure-ASGI middleware with one job, outermost
first (``http/app.py`` ``create_app`` stacks them):

- ``HeaderLimit``: the total header size (431, ``max_header_bytes``);
- ``StripPrefixes``: the mount path and Gym's ``/ng-rollout/<id>/`` removed (``http/prefixes.py``);
  a rollout prefix Gym would not route is a 404;
- ``RebindingCheck``: Host (421) and Origin (403) against the DNS-rebinding allow-lists that
  ``rebinding_protection`` builds from the settings (probes exempt);
- ``RequestSpan``: the request's trace span (``/mcp`` opens its own: ``http/mcp_route.py``).

Behind them Starlette's routing sends ``/mcp`` to ``McpRoute`` and everything else to the REST app.
Each refusal is one line (``refuse``): a JSON-RPC error on ``/mcp``, ``{"detail": ...}`` elsewhere,
counted in ``gym_mcp_bridge_rejections_total``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from itertools import chain
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from opentelemetry.trace import Span, SpanKind
from prometheus_client import Counter
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge import rollouts, tracing
from bridge.http import prefixes
from bridge.http.requests import text_headers
from bridge.http.responses import error, jsonrpc_error
from bridge.settings import Settings

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


async def answer_error(
    scope: Scope, receive: Receive, send: Send, status: int, reason: str, kind: str | None = None
) -> None:
    """A one-line refusal: a JSON-RPC error on ``/mcp``, else ``{"detail": reason}``, each naming its
    failure (``kind``, else what ``status`` implies) in Gym's words."""
    if scope["path"] == "/mcp":
        allow = {"allow": "POST, DELETE"} if status == 405 else None
        response: Response = Response(
            jsonrpc_error(status, reason, kind=kind),
            status_code=status,
            media_type="application/json",
            headers=allow,
        )
    else:
        response = error(status, reason, kind=kind)
    await response(scope, receive, send)


async def refuse(
    scope: Scope, receive: Receive, send: Send, status: int, reason: str, kind: str, rejections: Counter
) -> None:
    """``answer_error``, counted under ``kind``."""
    rejections.labels(kind).inc()
    await answer_error(scope, receive, send, status, reason, kind)


class HeaderLimit:
    """431 when a request's headers (names, values, and 4 bytes of framing each) exceed ``limit``."""

    def __init__(self, app: ASGIApp, limit: int, mount: str, rejections: Counter) -> None:
        self.app = app
        self.limit = limit
        self.mount = mount  # only to answer on the route's terms: a JSON-RPC error on /mcp
        self.rejections = rejections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            size = sum(map(len, chain.from_iterable(headers))) + 4 * len(headers)
            if size > self.limit:
                routed, _ = prefixes.strip(scope, self.mount)
                reason = f"request headers too large ({size} bytes, limit {self.limit}; max_header_bytes)"
                await refuse(routed, receive, send, 431, reason, "header_size", self.rejections)
                return
        await self.app(scope, receive, send)


class StripPrefixes:
    """Routes the path without the mount path and Gym's rollout prefix (``prefixes.strip``, which
    keeps the rollout id in the scope); 404 for a ``/ng-rollout/`` path Gym's middleware would not
    match."""

    def __init__(self, app: ASGIApp, mount: str, rejections: Counter) -> None:
        self.app = app
        self.mount = mount  # served under a path: advertise_url's
        self.rejections = rejections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope, bad_prefix = prefixes.strip(scope, self.mount)
            if bad_prefix is not None:
                await refuse(scope, receive, send, 404, bad_prefix, "rollout_id", self.rejections)
                return
        await self.app(scope, receive, send)


class RebindingCheck:
    """421 for a Host, 403 for an Origin outside the allow-lists (``rebinding_protection``); the
    probes are exempt (kubelet sends the pod IP as Host)."""

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings, rejections: Counter) -> None:
        self.app = app
        self.hosts = AllowList(security.allowed_hosts or [])
        self.origins = AllowList(security.allowed_origins or [])
        self.rejections = rejections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in PROBE_PATHS:
            found = {}
            for key, value in scope["headers"]:  # the last of each, as a dict of them would keep
                if key == b"host" or key == b"origin":
                    found[key] = value
            refused = rebinding_refusal(found, self.hosts, self.origins)
            if refused is not None:
                await refuse(scope, receive, send, *refused, self.rejections)
                return
        await self.app(scope, receive, send)


class RequestSpan:
    """With tracing on, the request's server span (``request_span``) around everything behind it;
    not for the probes, ``/metrics`` or ``/mcp`` (which opens its own once it has read the body).
    Stacked only when tracing is on (``tracing.configure`` runs before the app is built)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if tracing.ENABLED and scope["type"] == "http":
            path = scope["path"]
            if path not in PROBE_PATHS and path != "/metrics" and path != "/mcp":
                with request_span(scope):
                    await self.app(scope, receive, send)
                return
        await self.app(scope, receive, send)


@contextlib.contextmanager
def request_span(scope: Scope) -> Iterator[Span | None]:
    """The server span of an HTTP request: ``METHOD /path``, its parent from ``traceparent``."""
    parent = tracing.parent_from(text_headers(scope["headers"]))
    path = scope["path"]
    attributes = {"url.path": path, **rollout_attribute(scope)}
    with tracing.span(f"{scope['method']} {path}", SpanKind.SERVER, parent, **attributes) as span:
        yield span


def rollout_attribute(scope: Scope) -> dict[str, str]:
    found = prefixes.rollout_id(scope)
    return {"gym.rollout_id": rollouts.label(found)} if found is not None else {}
