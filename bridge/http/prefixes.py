"""Path prefixes a request may carry in front of its route, removed by the guard before routing.

**The mount path.** A bridge served under a path behind a reverse proxy is told so by the path of
its ``advertise_url`` (``https://gym.example/envs/counter``): the MCP URL and ``url_path`` it hands
out carry that path, and a request that arrives with it (a proxy that does not strip it, or a Gym
agent joining ``url_path`` to the bridge's own address) is routed as if it had not. A proxy that
strips the path sends bare paths, which are served as they are.

**Gym's rollout prefix.** With ``observability_enabled: true`` nemo-gym 0.7's
``ServerClient.request`` puts ``/ng-rollout/<rollout id>`` in front of every path it sends to a
resources server (``/seed_session``, ``/verify``, each tool, ``/close_session``), and Gym's own
servers strip it again in ``RolloutContextMiddleware`` before routing. ``strip`` routes every path
exactly as that middleware does (``bridge.rollouts.PREFIX``: the same pattern, matched the same way):

* a path it matches is routed as its ``rest``, whatever the id's length, and a line break right at
  its end is dropped as Gym's ``$`` drops it (``/ng-rollout/a/seed_session\\n`` is ``/seed_session``;
  over HTTP only as ``%0A``: uvicorn refuses a raw line break in a request line). The id goes on in
  the scope (``rollout_id(scope)``), whole, for the session, the provenance it signs, and the
  upstream or owner replica the request is sent on to; logs, spans and the audit log get
  ``rollouts.label(id)`` (see ``bridge.rollouts``).
* a path under ``/ng-rollout/`` it does not match (no id, an id breaking nemo-gym's
  ``ROLLOUT_ID_PATTERN`` -- ``..``, ``%0D%0A``, non-ASCII --, nothing after the id, a line break
  inside) Gym hands to its app unchanged, where no route has a second path segment: 404. The bridge
  answers that 404 itself, with a one-line reason, before its router or the upstream sees the path:
  the same routing result, and no byte of a path Gym would not route reaches a route (DESIGN's rule:
  nothing unvalidated on the upstream's request line). One path differs, and only on a Gym server
  with a catch-all ``POST /{path}`` route: ``/ng-rollout/`` itself, which Starlette's trailing-slash
  rule redirects there (307 to ``/ng-rollout``) where the bridge answers 404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

from starlette.types import Scope

from bridge.rollouts import PREFIX, ROLLOUT

SCOPE_KEY = "gym_mcp_bridge.rollout_id"
SHOWN_CHARS = 80  # of a refused path, in the reason


def mount_path(advertise_url: str) -> str:
    """The path the bridge is served under (``advertise_url``'s path without its trailing slash)."""
    return urlsplit(advertise_url).path.rstrip("/")


def strip(scope: Scope, mount: str = "") -> tuple[Scope, str | None]:
    """(scope for the routed path, None) after removing the mount path and a rollout prefix Gym's
    middleware matches; (scope, refusal) for a path under ``/ng-rollout/`` it does not match (the
    scope's path left as it was, as Gym leaves it); (scope, None) unchanged for any other path."""
    path: str = scope["path"]
    if mount and path.startswith(mount + "/"):
        path = path[len(mount) :]
        scope = {**scope, "path": path, "raw_path": quote(path).encode()}
    match = PREFIX.match(path)
    if match is None:
        if not path.startswith(ROLLOUT):
            return scope, None
        return scope, (
            f"no route {path[:SHOWN_CHARS]!r}: {ROLLOUT}<rollout id>/<route> needs an id of a letter or "
            "digit then letters, digits, '.', '_' or '-' (nemo-gym's ROLLOUT_ID_PATTERN) and a route "
            "after it, as nemo-gym's RolloutContextMiddleware matches it"
        )
    # Routing reads ``path``; ``raw_path`` keeps the prefix (percent-encoded again, never a decoded
    # byte) so that a request relayed to the session's owner replica carries the rollout id there too.
    return {
        **scope,
        "path": match.group("rest"),
        "raw_path": quote(path).encode(),
        SCOPE_KEY: match.group("rollout_id"),
    }, None


def rollout_id(scope: Scope | Any) -> str | None:
    """The rollout id a request carried in its ``/ng-rollout/<id>/`` prefix (whole), else None."""
    value = scope.get(SCOPE_KEY)
    return value if isinstance(value, str) else None
