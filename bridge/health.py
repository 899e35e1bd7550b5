"""``/healthz`` (liveness: always fast, never touches the upstream) and ``/readyz`` (readiness:
the upstream answers now and the tool list is loaded; otherwise 503 with a reason a person can
act on: which server is still starting and for how long of its budget, the exit code and log
tail of one that died, or the URL that does not answer).
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge import __version__
from bridge.core import Bridge


def healthz_payload(bridge: Bridge) -> dict[str, object]:
    host, port = bridge.bound
    return {
        "status": "ok",
        "version": __version__,
        "bound": {"host": host, "port": port},
        "advertise_url": bridge.advertise_url,
        "uptime_s": round(time.time() - bridge.started_at, 3),
        "sessions_active": len(bridge.sessions),
        "upstream": bridge.upstream.status(),
    }


class Health:
    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    async def healthz(self, request: Request) -> Response:
        return JSONResponse(healthz_payload(self.bridge))

    async def readyz(self, request: Request) -> Response:
        reason = self.bridge.not_ready_reason()
        if reason is None:
            reason = await self.bridge.upstream.probe()
        if reason is not None:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return JSONResponse(
            {
                "ready": True,
                "upstream": self.bridge.upstream.url,
                "tools": len(self.bridge.toolsets.openapi.tools) if self.bridge.toolsets else 0,
            }
        )
