"""Every failure the bridge answers by itself, named in NeMo Gym's shared failure vocabulary.

Gym (0.7 and later) names failures with one low-cardinality vocabulary (``nemo_gym/failure_kinds.py``:
``session_lost``, ``session_expired``, ``transport_unreachable``, ``transport_timeout``, ...), and an
environment names what the vocabulary has no name for as ``<server>:<kind>``. The bridge never
imports ``nemo_gym``: ``GYM_FAILURE_KINDS`` is a copy of Gym 0.7.0's names, checked against the real
module by ``tests/test_failure_kinds.py``.

``of(kind, reason)`` is the one map: a refusal's ``Rejected.kind`` (or the name of a failure the HTTP
layer meets before a ``Rejected`` exists: a guard, an unreachable owner, an upstream timeout) to a
``Failure``: the Gym ``failure_kind``, whether it is ``terminal`` (Gym's word, ``EpisodeFailure.terminal``:
re-running the rollout cannot succeed until someone fixes something) and the ``failure_reason``,
the one-line reason with what a retry can do. ``bridge.http.responses`` renders it into every
refusal body; the rejections metric counts by its ``failure_kind``. Answers the upstream gave are
never rewritten and carry none of this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NAMESPACE = "gym_mcp_bridge"  # Gym's ``<server>:<kind>`` for a failure its vocabulary has no name for

# nemo_gym 0.7.0 ``failure_kinds.FAILURE_KINDS``, name for name.
GYM_FAILURE_KINDS = frozenset(
    {
        "transport_unreachable",
        "transport_peer_drop",
        "transport_timeout",
        "transport_local_resource",
        "agent_run_error",
        "agent_request_failed",
        "agent_timeout",
        "agent_command_not_allowed",
        "judge_failed",
        "judge_unparseable",
        "verifier_error",
        "provider_unavailable",
        "provider_quota_exhausted",
        "provider_oom_killed",
        "session_lost",
        "session_expired",
        "session_release_failed",
        "cancelled",
        "kill_shaped",
        "shutdown",
        "persistence_failed",
        "cohort_incomplete",
    }
)
SESSION_LOST = "session_lost"
SESSION_EXPIRED = "session_expired"
TRANSPORT_UNREACHABLE = "transport_unreachable"
TRANSPORT_TIMEOUT = "transport_timeout"
SHUTDOWN = "shutdown"

# What a retry can do, said after the reason.
RETRY = "retryable: the same request can succeed later"
RERUN = "retryable as a new rollout: this session cannot serve again; re-run the rollout from /seed_session"
FIX = "a retry of this request cannot succeed as sent; fix it (a re-run of the rollout may differ)"
TERMINAL = "terminal: no retry or re-run can succeed until the deployment or the row is fixed"

# ``Rejected.kind`` (and the HTTP layer's own failure names) -> (Gym failure kind, what a retry can do).
# A kind absent here is ``gym_mcp_bridge:<kind>``, fixed by the sender.
KINDS: dict[str, tuple[str, str]] = {
    # the session a request names
    "lost": (SESSION_LOST, RERUN),  # the upstream or this replica restarted since the seed
    "ended": (SESSION_LOST, RERUN),  # closed, finished, released under the budget
    "session": (SESSION_LOST, RERUN),  # its record released, or never seeded here
    "expired": (SESSION_EXPIRED, RERUN),  # session_ttl_s passed since the seed
    "token_expired": (SESSION_EXPIRED, RERUN),  # the token's exp: the same session_ttl_s
    # the token
    "missing": (f"{NAMESPACE}:token_missing", TERMINAL),
    "token": (f"{NAMESPACE}:token_invalid", RERUN),
    "peer": (f"{NAMESPACE}:peer", TERMINAL),
    "foreign": (f"{NAMESPACE}:foreign", RETRY),
    "api_key": (f"{NAMESPACE}:api_key", TERMINAL),
    # where the request could not go
    "owner_unreachable": (TRANSPORT_UNREACHABLE, RERUN),  # the replica that holds the session
    "owner_timeout": (TRANSPORT_TIMEOUT, RETRY),
    "upstream_unreachable": (TRANSPORT_UNREACHABLE, RETRY),
    "upstream_timeout": (TRANSPORT_TIMEOUT, RETRY),
    # the bridge's own state
    "not_ready": (f"{NAMESPACE}:not_ready", RETRY),
    "cap": (f"{NAMESPACE}:cap", RETRY),
    "budget": (f"{NAMESPACE}:budget", RETRY),
    "draining": (SHUTDOWN, RETRY),  # this replica is shutting down; another one takes the seed
    "internal": (f"{NAMESPACE}:internal", RETRY),
    # deployment and data no retry fixes
    "row_tools": (f"{NAMESPACE}:row_tools", TERMINAL),
    "no_verify": (f"{NAMESPACE}:no_verify", TERMINAL),
    "example_row": (f"{NAMESPACE}:example_row", TERMINAL),
    "forward_loop": (f"{NAMESPACE}:forward_loop", TERMINAL),  # peers forwarding in a circle
    "host": (f"{NAMESPACE}:host", TERMINAL),
    "origin": (f"{NAMESPACE}:origin", TERMINAL),
}

# The failure name of a status when a refusal names no kind (Starlette's own 404/405, a 500).
BY_STATUS = {
    400: "bad_request",
    404: "no_route",
    405: "method",
    413: "body_size",
    415: "media_type",
    421: "host",
    431: "header_size",
    500: "internal",
    502: "upstream_unreachable",
    503: "not_ready",
    504: "upstream_timeout",
}


@dataclass(frozen=True, slots=True)
class Failure:
    """A failure in Gym's words: ``kind`` (``failure_kind``), ``terminal`` and ``reason``
    (``failure_reason``: the refusal's one line, then what a retry can do); ``name`` is the bridge's
    own (a ``Rejected.kind``, the rejections metric's label)."""

    kind: str
    terminal: bool
    reason: str
    name: str

    def fields(self) -> dict[str, Any]:
        """The keys every refusal body carries beside its ``detail`` or ``message``."""
        return {"failure_kind": self.kind, "failure_reason": self.reason, "terminal": self.terminal}


def failure_kind(kind: str) -> str:
    """The Gym failure kind of a refusal kind (what the rejections metric is labelled with)."""
    known = KINDS.get(kind)
    return known[0] if known is not None else f"{NAMESPACE}:{kind}"


def of(kind: str | None, reason: str, status: int | None = None) -> Failure:
    """The failure a refusal of ``kind`` (else the name ``status`` implies) is, said with ``reason``."""
    name = kind if kind is not None else BY_STATUS.get(status or 0, "refused")
    gym_kind, retry = KINDS.get(name, (f"{NAMESPACE}:{name}", FIX))
    line = reason.splitlines()[0] if reason else name
    return Failure(gym_kind, retry == TERMINAL, f"{line} ({retry})", name)


def refusal_body(reason: str, kind: str | None = None, status: int | None = None) -> dict[str, Any]:
    """A REST refusal's JSON object: ``detail`` (the one line) and the failure's fields."""
    return {"detail": reason, **of(kind, reason, status).fields()}
