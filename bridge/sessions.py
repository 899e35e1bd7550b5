"""Per-rollout sessions: the registry that maps a session id to its upstream state.

``/seed_session`` creates a ``Session`` (seeded row as compact JSON bytes, the upstream cookie,
the session's interned tool set, the upstream generation it was built on, expiry) and the token
that names it. Every request carrying that token looks the session up here, in this order of
refusals: unknown id, closed, expired, lost (the upstream restarted since the seed). The
registry is bounded: at most ``max_sessions`` open sessions (``SessionCapReached`` past that),
at most ``max_calls_logged`` call records per session, and tombstones of closed or lost sessions
kept only until their tokens would have expired anyway.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from bridge.calllog import ToolCallRecord
from bridge.tools import ToolSet

LOST_REASON = (
    "session lost: the upstream resources server restarted after this session was seeded, "
    "its state is gone; seed a new session"
)


class SessionError(Exception):
    """The session a request names cannot serve it; str(exc) is the one-line reason."""


class SessionLost(SessionError):
    """The upstream restarted after the session was seeded: its state is gone."""


class SessionCapReached(Exception):
    pass


@dataclass(slots=True)
class Session:
    sid: str
    row_json: bytes
    cookie: str
    toolset: ToolSet
    generation: int
    created_at: float
    expires_at: float
    token: str = ""
    calls: list[ToolCallRecord] = field(default_factory=list)
    calls_dropped: int = 0

    @property
    def row(self) -> dict[str, Any]:
        value = orjson.loads(self.row_json)
        return value if isinstance(value, dict) else {}

    @property
    def tool_names(self) -> tuple[str, ...]:
        return self.toolset.names


class SessionRegistry:
    def __init__(self, ttl_s: float, max_sessions: int, max_calls_logged: int) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_calls_logged = max_calls_logged
        self._open: OrderedDict[str, Session] = OrderedDict()  # in creation order, so expiry is FIFO
        self._tombstones: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._generation = 0

    def __len__(self) -> int:
        return len(self._open)

    def create(self, row_json: bytes, cookie: str, toolset: ToolSet, generation: int) -> Session:
        now = time.time()
        self.sweep(now)
        if len(self._open) >= self.max_sessions:
            raise SessionCapReached(f"session cap reached ({self.max_sessions} open sessions)")
        session = Session(
            sid=uuid.uuid4().hex,
            row_json=row_json,
            cookie=cookie,
            toolset=toolset,
            generation=generation,
            created_at=now,
            expires_at=now + self.ttl_s,
        )
        self._open[session.sid] = session
        return session

    def get(self, sid: str, generation: int) -> Session:
        session = self._open.get(sid)
        if session is None:
            tomb = self._tombstones.get(sid)
            if tomb is not None:
                reason = tomb[0]
                raise SessionLost(reason) if reason.startswith("session lost") else SessionError(reason)
            raise SessionError(f"unknown session {sid} (expired and evicted, or never seeded here)")
        if session.expires_at <= time.time():
            self._bury(session, "session expired")
            raise SessionError("session expired")
        if session.generation != generation:
            self._bury(session, LOST_REASON)
            raise SessionLost(LOST_REASON)
        return session

    def close(self, sid: str) -> Session | None:
        session = self._open.get(sid)
        if session is not None:
            self._bury(session, "session closed (its token was revoked by /close_session)")
        return session

    def record(self, session: Session, call: ToolCallRecord) -> None:
        if len(session.calls) < self.max_calls_logged:
            session.calls.append(call)
        else:
            session.calls_dropped += 1

    def sweep(self, now: float | None = None, generation: int | None = None) -> int:
        """Evict expired sessions, sessions of a replaced upstream, and stale tombstones.

        Returns how many open sessions were evicted."""
        now = time.time() if now is None else now
        evicted = 0
        if generation is not None and generation != self._generation:
            self._generation = generation
            for session in [s for s in self._open.values() if s.generation != generation]:
                self._bury(session, LOST_REASON)
                evicted += 1
        while self._open:
            sid, session = next(iter(self._open.items()))
            if session.expires_at > now:
                break
            self._bury(session, "session expired")
            evicted += 1
        while self._tombstones:
            sid, (_, until) = next(iter(self._tombstones.items()))
            if until > now and len(self._tombstones) <= self.max_sessions:
                break
            del self._tombstones[sid]
        return evicted

    def _bury(self, session: Session, reason: str) -> None:
        self._open.pop(session.sid, None)
        self._tombstones[session.sid] = (reason, session.expires_at)
