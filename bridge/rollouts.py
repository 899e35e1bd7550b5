"""Gym 0.7's rollout id: the rule a ``/ng-rollout/<id>/`` prefix is matched by, and the bounded
form of an id for the places that must stay small.

**The rule** is nemo-gym 0.7.0's own (``nemo_gym.rollout_correlation``): ``ROLLOUT_ID_PATTERN`` is
``^[A-Za-z0-9][A-Za-z0-9._-]*$``, and ``RolloutContextMiddleware`` routes a request whose ASGI
``path`` (already percent-decoded) matches ``^/ng-rollout/(?P<rollout_id><that pattern, unanchored>)
(?P<rest>/.*)$`` as ``rest`` -- with Python's ``re.match``, so ``.`` stops at a line break and ``$``
also matches just before a final one: ``/ng-rollout/a/seed_session\\n`` is routed as
``/seed_session``, ``/ng-rollout/a/se\\ned`` is not matched. The id has no length cap. ``PREFIX``
below is built the same way and used the same way (``bridge.http.prefixes.strip``); a table test
runs Gym's middleware and ``strip`` on one corpus (``tests/test_rollout_prefix.py``).

**Whole or bounded.** An id that matched is only ASCII letters, digits, ``.``, ``_`` and ``-``: safe
in a request line, a JSON string, a log line. Neither Gym nor the bridge caps its length; the HTTP
parser does: uvicorn's httptools answers 400 for a request target over 65535 bytes, on Gym's server
as on the bridge, so an id that arrives over HTTP is under 64 KiB. It is kept **whole** where it
must be exact: the request's scope, the session (one copy, beside the seeded row it keeps anyway),
the upstream's request line and the owner replica's (both route it as Gym's server does), and
``_bridge.provenance``, where it is signed. Everywhere else it is ``label(id)``: the id itself up to
``LABEL_CHARS`` characters (every id Gym makes, ``<task>-<rollout>[-a<n>]``, or a caller's
``_ng_rollout_id`` is far shorter), else its first ``LABEL_HEAD`` characters, its length and the
first 16 hex digits of its SHA-256: the audit log's lines, span attributes and names, log lines,
error texts naming an upstream path (``shown_path``), so a long id costs a line no more than a short
one. Metrics never carry it (a series per rollout would grow without end).
"""

from __future__ import annotations

import hashlib
import re

PREFIX_SEGMENT = "ng-rollout"  # nemo-gym's ROLLOUT_PATH_PREFIX
ROLLOUT = f"/{PREFIX_SEGMENT}/"
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # nemo-gym's ROLLOUT_ID_PATTERN, unanchored
# RolloutContextMiddleware._PREFIX, character for character; used with .match, as Gym does
PREFIX = re.compile(rf"^/{re.escape(PREFIX_SEGMENT)}/(?P<rollout_id>{ID_PATTERN.pattern})(?P<rest>/.*)$")
LABEL_CHARS = 128
LABEL_HEAD = 64


def label(rollout_id: str) -> str:
    """The id for a log line, an audit line or a span: whole up to ``LABEL_CHARS`` characters, else
    ``<first LABEL_HEAD characters>...[<n> chars, sha256:<16 hex>]`` (deterministic: an operator
    holding the whole id computes the same label)."""
    if len(rollout_id) <= LABEL_CHARS:
        return rollout_id
    digest = hashlib.sha256(rollout_id.encode()).hexdigest()[:16]
    return f"{rollout_id[:LABEL_HEAD]}...[{len(rollout_id)} chars, sha256:{digest}]"


def shown_path(path: str) -> str:
    """An upstream path for a span or a message: its ``/ng-rollout/<id>`` with ``label(id)``."""
    if not path.startswith(ROLLOUT):
        return path
    rollout_id, slash, rest = path[len(ROLLOUT) :].partition("/")
    return f"{ROLLOUT}{label(rollout_id)}{slash}{rest}"
