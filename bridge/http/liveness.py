"""The ``/healthz`` body: one shape while the bridge starts (``serving.ServingApp``) and after
(``health.Health``), and this process's random ``instance`` id, which the advertise check reads back.

Both of those modules import this one; it imports nothing of the HTTP layer, so the one that serves
from the bind (``serving``) never depends on the app it starts (no import circle).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from bridge import __version__
from bridge.settings import Settings, advertise_url
from bridge.upstream import Upstream

INSTANCE = uuid.uuid4().hex  # this process, as /healthz reports it (the advertise check reads it)


def liveness(
    settings: Settings, upstream: Upstream, bound: tuple[str, int], started_at: float, sessions: int
) -> dict[str, Any]:
    """The ``/healthz`` body, while starting and after."""
    host, port = bound
    return {
        "status": "ok",
        "version": __version__,
        "instance": INSTANCE,
        "bound": {"host": host, "port": port},
        "advertise_url": advertise_url(settings, bound),
        "rest_auth": "api_key" if settings.api_key is not None else "none",
        "uptime_s": round(time.time() - started_at, 3),
        "sessions_active": sessions,
        "upstream": upstream.status(),
    }
