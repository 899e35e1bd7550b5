"""The ASGI application: the guards, then routes of both surfaces, health and metrics, error
rendering, lifespan.

``create_app(bridge)`` expects a started ``Bridge`` (``serving.ServingApp`` starts it behind the
probes, then builds this app and runs its ``lifespan``). Outermost first: ``HeaderLimit``,
``StripPrefixes``, ``RebindingCheck``, ``RequestSpan`` (``http/guard.py``), then Starlette's
routing: ``/mcp`` to ``McpRoute`` (``http/mcp_route.py``) by a bare router, without the REST app's
error middleware, which the request a rollout sends thousands of times has no use for; every other
path to the REST app (``Starlette``: health, metrics, ``/openapi.json``, Gym's routes). The lifespan runs the MCP session
manager, the session sweeper and, in managed mode, the upstream supervisor; on shutdown (after
uvicorn has drained in-flight requests) it stops the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp

from bridge import tracing
from bridge.http import accept
from bridge.http.forwarding import Forwarding
from bridge.http.guard import HeaderLimit, RebindingCheck, RequestSpan, StripPrefixes, rebinding_protection
from bridge.http.health import Health
from bridge.http.mcp import McpEndpoint
from bridge.http.mcp_route import McpRoute
from bridge.http.openapi import OpenApiDocument
from bridge.http.prefixes import mount_path
from bridge.http.responses import error
from bridge.http.rest import RestSurface
from bridge.service import Bridge

log = logging.getLogger("gym_mcp_bridge")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error(404, f"no route {request.method} {request.url.path}")
    if exc.status_code == 405:  # with the route's Allow header (RFC 9110)
        refused = error(405, f"method {request.method} not allowed on {request.url.path}")
        refused.headers.update(exc.headers or {})
        return refused
    return error(exc.status_code, str(exc.detail))


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error(500, f"internal error ({type(exc).__name__}); see the bridge log")


Lifespan = Callable[[], contextlib.AbstractAsyncContextManager[None]]


def create_app(bridge: Bridge) -> tuple[ASGIApp, Lifespan]:
    """The app to serve, and its lifespan (the MCP session manager, the sweeper, the releaser, the
    supervisor), which the server runs."""
    security = rebinding_protection(bridge.settings, str(bridge.bound[0]), bridge.advertise_url)
    forwarding = Forwarding.of(bridge)
    bridge.metrics.watch_clients(accept.client_connections)
    bridge.metrics.watch_pool("upstream", lambda: bridge.upstream.pool_stats().as_dict())
    bridge.metrics.watch_pool("peers", lambda: forwarding.stats().as_dict())
    mcp = McpEndpoint(bridge, security=security, forwarding=forwarding)
    mcp.server.name = bridge.upstream.server_name
    health = Health(bridge)

    async def metrics(request: Request) -> Response:
        return Response(bridge.metrics.render(), media_type="text/plain; version=0.0.4")

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        tasks = [asyncio.create_task(bridge.sweep_forever()), asyncio.create_task(bridge.releaser.run())]
        if bridge.upstream.mode == "managed":
            tasks.append(asyncio.create_task(bridge.upstream.supervise()))
        try:
            async with mcp.manager.run():
                yield
        finally:
            for task in tasks:
                task.cancel()
            await forwarding.aclose()
            await bridge.upstream.stop()

    routes = [
        Route("/healthz", health.healthz, methods=["GET"]),
        Route("/health", health.healthz, methods=["GET"]),  # the name other Gym tooling probes
        Route("/readyz", health.readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", OpenApiDocument(bridge).get, methods=["GET"]),
        *RestSurface(bridge, forwarding).routes(),
    ]
    rest = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _server_error})
    rejections = bridge.metrics.rejections
    app: ASGIApp = Router([Route("/mcp", McpRoute(mcp, bridge.settings, rejections))], default=rest)
    if tracing.ENABLED:
        app = RequestSpan(app)
    if security.enable_dns_rebinding_protection:
        app = RebindingCheck(app, security, rejections)
    mount = mount_path(bridge.advertise_url)
    app = StripPrefixes(app, mount, rejections)
    app = HeaderLimit(app, bridge.settings.max_header_bytes, mount, rejections)
    return app, lifespan
