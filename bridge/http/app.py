"""The ASGI application: routes of both surfaces, health and metrics, error rendering, lifespan,
behind the ``Guard``.

``create_app(bridge)`` expects a started ``Bridge`` (``serving.ServingApp`` starts it behind the
probes, then builds this app and runs its ``lifespan``). The lifespan runs the MCP session
manager, the session sweeper and, in managed mode, the upstream supervisor; on shutdown (after
uvicorn has drained in-flight requests) it stops the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.http import accept
from bridge.http.forwarding import Forwarding
from bridge.http.guard import Guard, rebinding_protection
from bridge.http.health import Health
from bridge.http.mcp import McpEndpoint
from bridge.http.openapi import OpenApiDocument
from bridge.http.responses import error
from bridge.http.rest import RestSurface
from bridge.service import Bridge

log = logging.getLogger("gym_mcp_bridge")


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
        Route("/mcp", mcp.app),
        Route("/openapi.json", OpenApiDocument(bridge).get, methods=["GET"]),
        *RestSurface(bridge, forwarding).routes(),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _server_error})
    guard = Guard(app, mcp, bridge, security)
    guard.lifespan = lifespan
    return guard
