"""``/healthz`` (liveness: always fast, never touches the upstream) and ``/readyz`` (readiness:
the upstream answers now, the tool list is loaded and, when ``advertise_url`` is configured, that
URL reaches this very bridge; otherwise 503 with a reason a person can act on: which server is
still starting and for how long of its budget, the exit code and log tail of one that died, the
URL that does not answer, or the advertise URL that points elsewhere).

The advertise check asks ``<advertise_url>/healthz`` for this process's random ``instance`` id;
a success is remembered for a minute, a failure is retried on the next probe.
"""

from __future__ import annotations

import time
import uuid

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge import __version__
from bridge.core import Bridge

INSTANCE = uuid.uuid4().hex
ADVERTISE_CHECK_TTL_S = 60.0


def healthz_payload(bridge: Bridge) -> dict[str, object]:
    host, port = bridge.bound
    return {
        "status": "ok",
        "version": __version__,
        "instance": INSTANCE,
        "bound": {"host": host, "port": port},
        "advertise_url": bridge.advertise_url,
        "uptime_s": round(time.time() - bridge.started_at, 3),
        "sessions_active": len(bridge.sessions),
        "upstream": bridge.upstream.status(),
    }


class Health:
    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self._advertise_ok_until = 0.0

    async def advertise_problem(self) -> str | None:
        """None when advertise_url (if configured) reaches this bridge, else why not."""
        url = self.bridge.settings.advertise_url
        if url is None or time.monotonic() < self._advertise_ok_until:
            return None
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                answer = await client.get(f"{url}/healthz")
            instance = answer.json().get("instance") if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            return (
                f"advertise_url {url} does not reach this bridge: {type(exc).__name__}: {exc}".splitlines()[0]
            )
        if instance != INSTANCE:
            return (
                f"advertise_url {url} reaches another server, not this bridge; sessions seeded here would "
                "send harnesses elsewhere (fix --advertise-url / GYM_MCP_BRIDGE_ADVERTISE_URL)"
            )
        self._advertise_ok_until = time.monotonic() + ADVERTISE_CHECK_TTL_S
        return None

    async def healthz(self, request: Request) -> Response:
        return JSONResponse(healthz_payload(self.bridge))

    async def readyz(self, request: Request) -> Response:
        reason = self.bridge.not_ready_reason()
        if reason is None:
            reason = await self.bridge.upstream.probe()
        if reason is None:
            reason = await self.advertise_problem()
        if reason is not None:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return JSONResponse(
            {
                "ready": True,
                "upstream": self.bridge.upstream.url,
                "tools": len(self.bridge.toolsets.openapi.tools) if self.bridge.toolsets else 0,
            }
        )
