"""Path prefixes a request may carry in front of its route, removed by the guard before routing.

**The mount path.** A bridge served under a path behind a reverse proxy is told so by the path of
its ``advertise_url`` (``https://gym.example/envs/counter``): the MCP URL and ``url_path`` it hands
out carry that path, and a request that arrives with it (a proxy that does not strip it, or a Gym
agent joining ``url_path`` to the bridge's own address) is routed as if it had not. A proxy that
strips the path sends bare paths, which are served as they are.

**Gym's rollout prefix.** With ``observability_enabled: true`` nemo-gym 0.7's
``ServerClient.request`` puts ``/ng-rollout/<rollout id>`` in front of every path it sends to a
resources server (``/seed_session``, ``/verify``, each tool, ``/close_session``), and Gym's own
servers strip it again in ``RolloutContextMiddleware`` before routing. So does ``strip`` here; the id
goes on in the scope (``rollout_id(scope)``) for the session, the logs, traces, audit log and
provenance, and to an upstream that strips the prefix itself.

The rollout id is what a stranger wrote, so it must pass Gym's own rule (``ROLLOUT_ID_PATTERN`` in
``nemo_gym.rollout_correlation``: a letter or digit, then letters, digits, ``.``, ``_``, ``-``) and
this bridge's length cap before it is kept or sent anywhere; a path under ``/ng-rollout/`` that does
not is refused with 404 and its reason, as Gym's servers answer 404 for a prefix their middleware
does not match.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.types import Scope

ROLLOUT = "/ng-rollout/"
MAX_ID_CHARS = 128
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SCOPE_KEY = "gym_mcp_bridge.rollout_id"


def mount_path(advertise_url: str) -> str:
    """The path the bridge is served under (``advertise_url``'s path without its trailing slash)."""
    return urlsplit(advertise_url).path.rstrip("/")


def strip(scope: Scope, mount: str = "") -> tuple[Scope, str | None]:
    """(scope for the bare path, None) after removing the mount path and a valid rollout prefix;
    (scope, refusal) for a rollout prefix whose id breaks the rule; (scope, None) unchanged for a
    request with neither."""
    path: str = scope["path"]
    if mount and path.startswith(mount + "/"):
        path = path[len(mount) :]
        scope = {**scope, "path": path, "raw_path": quote(path).encode()}
    if not path.startswith(ROLLOUT):
        return scope, None
    rollout, slash, rest = path[len(ROLLOUT) :].partition("/")
    if not slash:
        return scope, f"no route {path[:200]!r}: /ng-rollout/<rollout id>/ must be followed by a path"
    if len(rollout) > MAX_ID_CHARS:
        return scope, (
            f"rollout id too long ({len(rollout)} characters, limit {MAX_ID_CHARS}) in /ng-rollout/<id>/"
        )
    if "\n" in rest:  # Gym's middleware pattern does not match across a line break either
        return scope, "no route: a line break in the path after /ng-rollout/<rollout id>/"
    if ID_PATTERN.fullmatch(rollout) is None:
        return scope, (
            f"invalid rollout id {rollout[:64]!r} in /ng-rollout/<id>/: a letter or digit, then letters, "
            "digits, '.', '_' or '-' (nemo-gym's ROLLOUT_ID_PATTERN)"
        )
    # Routing reads ``path``; ``raw_path`` keeps the prefix (percent-encoded again, never a decoded
    # byte) so that a request relayed to the session's owner replica carries the rollout id there too.
    return {**scope, "path": "/" + rest, "raw_path": quote(path).encode(), SCOPE_KEY: rollout}, None


def rollout_id(scope: Scope | Any) -> str | None:
    """The rollout id a request carried in its ``/ng-rollout/<id>/`` prefix, else None."""
    value = scope.get(SCOPE_KEY)
    return value if isinstance(value, str) else None
