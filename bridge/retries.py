"""Retried tool calls, applied once.

A ``tools/call`` (MCP or REST) may name a retry key: an ``Idempotency-Key`` header (the IETF
httpapi draft) or a ``tools/call`` ``idempotencyKey`` param (the shape of MCP's SEP-3182), else the
request's JSON-RPC id within the ``Mcp-Session-Id`` the bridge gave at ``initialize``. ``key_of``
builds the ``RetryKey``; the service runs the call once per key within its rollout session
(``Attempt``: the call's fingerprint and its answer, a future that a repeat awaits while the first
is still running). A repeat with the same tool and arguments gets the first answer; with others it
is refused, naming the key. The call runs in its own task, so a client that disconnects mid-call
does not cancel it: its answer is kept for the retry.

Attempts live in their rollout session (``Session.retries``), charged to the state budget: the
answers of the last ``ANSWERS_KEPT`` are kept; an older key keeps only its fingerprint, and a
repeat of it is refused rather than applied again. A finished session drops them all.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, NamedTuple

from bridge.outcomes import ToolOutcome
from bridge.sessions import Session, SessionRegistry

KEY_MAX = 255  # characters of a key or an Mcp-Session-Id
ANSWERS_KEPT = 64  # answers kept per session; older keys keep only their fingerprint
ATTEMPT_BYTES = 300  # what an attempt holds besides its answer's body
MCP_SESSION_HEADER = b"mcp-session-id"
IDEMPOTENCY_HEADER = b"idempotency-key"


class RetryKey(NamedTuple):
    key: str  # unique within a rollout session
    label: str  # how a refusal names it
    matched_by: str  # metrics label: jsonrpc_id or idempotency_key


@dataclass(slots=True)
class Attempt:
    fingerprint: bytes  # of the tool name and arguments
    name: str
    answer: asyncio.Future[ToolOutcome] | None  # None once released (older than ANSWERS_KEPT)
    size: int  # bytes charged to the state budget


class Attempts(OrderedDict[str, Attempt]):
    """A session's attempts by retry key; ``kept``: those whose answers are kept, oldest first."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: deque[Attempt] = deque()


class RetryRefused(ValueError):
    """A repeated key that cannot be answered with its first answer; str(exc) names it."""


def _checked(value: str, what: str) -> str:
    if not value or len(value) > KEY_MAX or not value.isprintable():
        raise ValueError(f"{what} must be 1-{KEY_MAX} printable characters")
    return value


def key_of(
    idempotency_key: Any = None, mcp_session: str | None = None, request_id: Any = None
) -> RetryKey | None:
    """The retry key of a call: its idempotency key, else its JSON-RPC id within an MCP session;
    None when it has neither (a stateless client without a key: every request is a new call).
    ValueError for a malformed key."""
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str):
            raise ValueError("idempotencyKey must be a string")
        key = _checked(idempotency_key, "an idempotency key")
        return RetryKey(f"key\x00{key}", f"idempotency key {key!r}", "idempotency_key")
    if mcp_session is None or request_id is None:
        return None
    label = _checked(mcp_session, "Mcp-Session-Id")
    return RetryKey(
        f"rpc\x00{label}\x00{type(request_id).__name__}\x00{request_id}",
        f"JSON-RPC id {request_id!r} of MCP session {label}",
        "jsonrpc_id",
    )


def fingerprint(name: str, sent: bytes) -> bytes:
    """A call's identity: its tool name and its arguments as sent to the upstream (``exactjson``)."""
    return hashlib.blake2b(name.encode() + b"\x00" + sent, digest_size=16).digest()


def previous(session: Session, retry: RetryKey, name: str, digest: bytes) -> Attempt | None:
    """The first attempt of ``retry`` in this session, if any; ``RetryRefused`` when it was another
    call or its answer is no longer held."""
    attempts = session.retries
    attempt = attempts.get(retry.key) if attempts is not None else None
    if attempt is None:
        return None
    if attempt.fingerprint != digest:
        raise RetryRefused(
            f"{retry.label} was already used for another call (tool {attempt.name!r} or other "
            "arguments): a retry must repeat the same tool and arguments; a new call needs a new key"
        )
    if attempt.answer is None:
        raise RetryRefused(
            f"{retry.label} was already answered and its answer is no longer held (the last "
            f"{ANSWERS_KEPT} are): not applied again"
        )
    return attempt


def remember(
    sessions: SessionRegistry,
    session: Session,
    retry: RetryKey,
    name: str,
    digest: bytes,
    answer: asyncio.Future[ToolOutcome],
) -> None:
    """Keep the first attempt of ``retry``; its answer's bytes are charged once it is settled, and
    the answers of attempts older than the last ``ANSWERS_KEPT`` are released."""
    if session.retries is None:
        session.retries = Attempts()
    attempts: Attempts = session.retries  # type: ignore[assignment]
    attempt = Attempt(digest, name, answer, ATTEMPT_BYTES)
    attempts[retry.key] = attempt
    attempts.kept.append(attempt)
    sessions.charge(session, ATTEMPT_BYTES)
    answer.add_done_callback(lambda done: _settled(sessions, session, attempt, done))
    while len(attempts.kept) > ANSWERS_KEPT:
        oldest = attempts.kept[0]
        if oldest.answer is not None and not oldest.answer.done():
            break  # still running: released by a later call
        attempts.kept.popleft()
        _release(sessions, session, oldest)


def _settled(
    sessions: SessionRegistry, session: Session, attempt: Attempt, done: asyncio.Future[ToolOutcome]
) -> None:
    if attempt.answer is done and not done.cancelled() and done.exception() is None:
        grown = len(done.result().body)
        attempt.size += grown
        sessions.charge(session, grown)


def _release(sessions: SessionRegistry, session: Session, attempt: Attempt) -> None:
    if attempt.answer is not None:
        attempt.answer = None
        sessions.charge(session, ATTEMPT_BYTES - attempt.size)
        attempt.size = ATTEMPT_BYTES
