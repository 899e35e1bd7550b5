"""What the bridge refuses to write to an upstream or a peer: ``check_request``.

Defence in depth (the entries validate tool names too): before a byte is written, the path must be
``/`` plus 1-128 of ``[A-Za-z0-9_.-]`` (the MCP tool-name rule, which ``/seed_session``,
``/verify``, ``/close_session``, ``/aggregate_metrics`` and every ``/<tool>`` fit), optionally under
Gym's ``/ng-rollout/<id>`` with an id of nemo-gym's rule (``bridge.rollouts``); header names must be
HTTP tokens other than the framing headers the client writes itself, and header values Latin-1
without control characters (tab allowed). Anything else raises ``UpstreamRequestRefused`` (a
``ValueError``; the caller answers 400), on the pooled and the httpx path alike.
"""

from __future__ import annotations

import re

from bridge.rollouts import ID_PATTERN, ROLLOUT


class UpstreamRequestRefused(ValueError):
    """A request that must not be sent (bad path or header); nothing was written (the caller's 400)."""


# The MCP tool-name rule; every path the bridge posts (/seed_session, /verify, /<tool>, ...) fits it:
# one path segment, optionally under Gym's rollout prefix /ng-rollout/<id> (nemo-gym's ROLLOUT_ID_PATTERN)
_PATH = re.compile(rf"(?:{re.escape(ROLLOUT)}{ID_PATTERN.pattern})?/[A-Za-z0-9_.-]{{1,128}}")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 field name
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CR, LF, NUL and the rest, tab excepted
_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})  # ours to write
_GOOD_NAMES: set[str] = set()  # header names already checked (a handful in practice; capped)


def check_request(path: str, headers: dict[str, str]) -> None:
    """Raise ``UpstreamRequestRefused`` with a one-line reason (never echoing a header value, which
    may be a session cookie) unless the request line and headers are safe to write."""
    if not _PATH.fullmatch(path):
        raise UpstreamRequestRefused(
            f"refused to send path {path[:80]!r}: it must be '/' plus 1-128 of A-Z a-z 0-9 _ . -, "
            "optionally under /ng-rollout/<id>"
        )
    for name, value in headers.items():
        if name not in _GOOD_NAMES:
            _check_name(name)
        if not (value.isascii() and value.isprintable()):  # the common case in 0.2 us; else look closer
            _check_value(name, value)


def _check_name(name: str) -> None:
    if not _TOKEN.fullmatch(name):
        raise UpstreamRequestRefused(f"refused to send header name {name[:80]!r}: not an HTTP token")
    if name.lower() in _FRAMING:
        raise UpstreamRequestRefused(f"refused to send header {name!r}: the client writes it itself")
    if len(_GOOD_NAMES) < 256:
        _GOOD_NAMES.add(name)


def _check_value(name: str, value: str) -> None:
    bad = _CONTROL.search(value)
    if bad is not None:
        raise UpstreamRequestRefused(
            f"refused to send header {name!r}: control character {ord(bad.group()):#04x} "
            f"at offset {bad.start()} of its value"
        )
    try:
        value.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise UpstreamRequestRefused(
            f"refused to send header {name!r}: non-Latin-1 character at offset {exc.start} of its value"
        ) from None
