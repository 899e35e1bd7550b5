"""``/healthz`` (liveness: always fast, never touches the upstream; with the connections and their
queues, ``Metrics.connection_report``) and ``/readyz`` (readiness:
the upstream answers now, the tool list is loaded and, when ``advertise_url`` is configured, that
URL does not reach some other server; otherwise 503 with a reason a person can act on: which
server is still starting and for how long of its budget, the exit code and log tail of one that
died, the URL that does not answer, the advertise URL that points at another server, or a replica
draining its sessions after SIGTERM).

The advertise check asks ``<advertise_url>/healthz`` for this process's random ``instance`` id. An
answer from another instance is fatal; no answer at all is only a warning in the body, since a
published port or a name only clients resolve may not be reachable from inside the bridge. A
success is remembered for a minute; anything else is checked again on the next probe.
"""

from __future__ import annotations

import time

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge.http.liveness import INSTANCE, liveness
from bridge.service import Bridge

ADVERTISE_CHECK_TTL_S = 60.0


def healthz_payload(bridge: Bridge) -> dict[str, object]:
    return {
        **liveness(bridge.settings, bridge.upstream, bridge.bound, bridge.started_at, len(bridge.sessions)),
        "connections": bridge.metrics.connection_report(),  # open, busy, idle, queued, limit per pool
    }


class Health:
    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self._advertise_ok_until = 0.0

    async def advertise_check(self) -> tuple[str | None, str | None]:
        """(fatal, warning) about advertise_url: fatal when it reaches another server, a warning
        when it cannot be reached from here (a published port or a name only clients resolve)."""
        url = self.bridge.settings.advertise_url
        if url is None or time.monotonic() < self._advertise_ok_until:
            return None, None
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                answer = await client.get(f"{url}/healthz")
            instance = answer.json().get("instance") if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return (
                None,
                f"advertise_url {url} cannot be reached from the bridge itself ({reason}); check that clients can",
            )
        if instance != INSTANCE:
            return (
                f"advertise_url {url} reaches another server, not this bridge; sessions seeded here would "
                "send harnesses elsewhere (fix --advertise-url / GYM_MCP_BRIDGE_ADVERTISE_URL)"
            ), None
        self._advertise_ok_until = time.monotonic() + ADVERTISE_CHECK_TTL_S
        return None, None

    async def healthz(self, request: Request) -> Response:
        return JSONResponse(healthz_payload(self.bridge))

    async def readyz(self, request: Request) -> Response:
        reason = self.bridge.drain_reason() or self.bridge.not_ready_reason()
        if reason is None:
            reason = await self.bridge.upstream.probe()
        warning = None
        if reason is None:
            reason, warning = await self.advertise_check()
        if reason is not None:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        toolsets = self.bridge.toolsets
        body: dict[str, object] = {
            "ready": True,
            "upstream": self.bridge.upstream.url,
            "tools": len(toolsets.openapi.tools) if toolsets else 0,
        }
        if warning:
            body["warnings"] = [warning]
        return JSONResponse(body)
