"""Gym's rollout prefix: ``/ng-rollout/<rollout id>/<path>`` is ``/<path>`` of rollout ``<rollout id>``.

With ``observability_enabled: true`` nemo-gym 0.7's ``ServerClient.request`` puts
``/ng-rollout/<id>`` in front of every path it sends to a resources server (``/seed_session``,
``/verify``, each tool, ``/close_session``), and Gym's own servers strip it again in
``RolloutContextMiddleware`` before routing. The guard does the same here, first, so a prefixed
request reaches exactly the route its bare path names; the id goes on in the scope
(``rollout_id(scope)``) for the session, the logs, traces, audit log and provenance, and to an
upstream that strips the prefix itself.

The id is what a stranger wrote, so it must pass Gym's own rule (``ROLLOUT_ID_PATTERN`` in
``nemo_gym.rollout_correlation``: a letter or digit, then letters, digits, ``.``, ``_``, ``-``) and
this bridge's length cap before it is kept or sent anywhere; a path under ``/ng-rollout/`` that does
not is refused with 404 and its reason, as Gym's servers answer 404 for a prefix their middleware
does not match.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import Scope

PREFIX = "/ng-rollout/"
MAX_ID_CHARS = 128
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SCOPE_KEY = "gym_mcp_bridge.rollout_id"


def strip(scope: Scope) -> tuple[Scope, str | None]:
    """(scope for the bare path, None) for a prefixed request with a valid id; (scope, refusal) for
    a prefixed one without; (scope, None) unchanged for any other."""
    path: str = scope["path"]
    if not path.startswith(PREFIX):
        return scope, None
    rollout, slash, rest = path[len(PREFIX) :].partition("/")
    if not slash:
        return scope, f"no route {path[:200]!r}: /ng-rollout/<rollout id>/ must be followed by a path"
    if len(rollout) > MAX_ID_CHARS:
        return (
            scope,
            f"rollout id too long ({len(rollout)} characters, limit {MAX_ID_CHARS}) in /ng-rollout/<id>/",
        )
    if ID_PATTERN.fullmatch(rollout) is None or "\n" in rest:
        return scope, (
            f"invalid rollout id {rollout[:64]!r} in /ng-rollout/<id>/: a letter or digit, then letters, "
            "digits, '.', '_' or '-' (nemo-gym's ROLLOUT_ID_PATTERN)"
        )
    bare = "/" + rest
    return {**scope, "path": bare, "raw_path": bare.encode(), SCOPE_KEY: rollout}, None


def rollout_id(scope: Scope | Any) -> str | None:
    """The rollout id a request carried in its ``/ng-rollout/<id>/`` prefix, else None."""
    value = scope.get(SCOPE_KEY)
    return value if isinstance(value, str) else None
