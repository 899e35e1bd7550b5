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
from bridge.settings import ENV_PREFIX, Settings, advertise_url
from bridge.upstream import Upstream

INSTANCE = uuid.uuid4().hex  # this process, as /healthz reports it (the advertise check reads it)


def liveness(
    settings: Settings, upstream: Upstream, bound: tuple[str, int], started_at: float, sessions: int
) -> dict[str, Any]:
    """The ``/healthz`` body, while starting and after."""
    host, port = bound
    status = upstream.status()
    if not upstream.ready:  # alive, but not serving yet: say what it waits for (/readyz has the tail)
        status["waiting"] = (upstream.not_ready_reason or "upstream starting").splitlines()[0]
    return {
        "status": "ok" if upstream.ready else "waiting for upstream",
        "version": __version__,
        "instance": INSTANCE,
        "bound": {"host": host, "port": port},
        "advertise_url": advertise_url(settings, bound),
        "rest_auth": "api_key" if settings.api_key is not None else "none",
        "session_tokens": {"signing_key": signing_key_source(settings), "ttl_s": settings.session_ttl_s},
        "uptime_s": round(time.time() - started_at, 3),
        "sessions_active": sessions,
        "upstream": status,
    }


def signing_key_source(settings: Settings) -> str:
    """Where the key that signs session tokens comes from (never the key)."""
    if settings.secret_file is not None:
        return f"from the file {settings.secret_file}"
    if settings.secret is not None:
        return f"from the secret setting (--secret / {ENV_PREFIX}SECRET)"
    return "generated for this process (its tokens die with it)"
