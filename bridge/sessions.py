"""Per-rollout sessions: the registry that maps a session id to its upstream state.

``/seed_session`` creates a ``Session`` (seeded row as compact JSON bytes, the upstream cookie,
the session's interned tool set, the upstream generation it was built on, expiry) and the token
that names it. Every request carrying that token looks the session up here, in this order of
refusals: unknown id, closed, expired, lost (the upstream restarted since the seed; or, decided by
``Bridge.authorize`` from the token's issue time, the bridge itself restarted since). The
registry is bounded: at most ``max_sessions`` open sessions (``SessionCapReached`` past that),
and tombstones of closed or lost sessions kept only until their tokens would have expired anyway.

Call logs are bounded too: a session keeps at most ``max_calls_logged`` records and
``max_session_log_bytes`` of them (``ToolCallRecord.size``), and all open sessions together at
most ``max_log_bytes``. A call past a cap still runs; it is left out of the log, which is then
incomplete (``Session.log_complete``), and ``Session.dropped`` keeps how many calls were left out
and which were the first few, so ``recorded`` verify can refuse naming them
(``Session.incomplete_reason``). Closing, expiring or losing a session gives its bytes back.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from bridge import exactjson
from bridge.calllog import LogRow, ToolCallRecord
from bridge.tools import ToolSet

LOST_REASON = (
    "session lost: the upstream resources server restarted after this session was seeded, "
    "its state is gone; seed a new session"
)


def restarted_reason(sid: str, issued_at: int, started_at: float) -> str:
    """The refusal for a session this bridge's own key signed before this process started: the
    sessions lived in the previous process's memory."""
    seeded = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(issued_at))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at))
    return (
        f"session lost: session {sid} was seeded at {seeded}, before this bridge restarted at "
        f"{started}; its state is gone; seed a new session"
    )


CLOSED_REASON = "session closed (its token was revoked by /close_session)"
EXPIRED_REASON = "session expired"
DEFAULT_MAX_SESSION_LOG_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_LOG_BYTES = 256 * 1024 * 1024
DROPPED_SHOWN = 3  # dropped calls named individually; the rest are counted


class SessionError(Exception):
    """The session a request names cannot serve it; str(exc) is the one-line reason."""


class SessionLost(SessionError):
    """The upstream restarted after the session was seeded: its state is gone."""


class SessionCapReached(Exception):
    pass


@dataclass(frozen=True, slots=True)
class DroppedCall:
    """A call left out of a session log: its position among the calls served (1-based), its
    canonical tool name, and the cap that left it out (``max_calls_logged=10000``)."""

    ordinal: int
    name: str
    cap: str

    def __str__(self) -> str:
        return f"#{self.ordinal} {self.name}: {self.cap}"


@dataclass(slots=True)
class DroppedCalls:
    """How many calls a session log left out, and the first ``DROPPED_SHOWN`` of them."""

    count: int = 0
    first: list[DroppedCall] = field(default_factory=list)

    def add(self, call: DroppedCall) -> None:
        self.count += 1
        if len(self.first) < DROPPED_SHOWN:
            self.first.append(call)

    def __str__(self) -> str:
        shown = ", ".join(str(call) for call in self.first)
        more = self.count - len(self.first)
        return f"{shown}, and {more} more" if more else shown


@dataclass(slots=True)
class Session:
    sid: str
    row_json: bytes
    cookie: str
    toolset: ToolSet
    generation: int
    expires_at: float
    token: str = ""
    upstream_headers: dict[str, str] | None = None  # an MCP-native upstream's own token
    # The log and its dropped calls are made by the first record: an idle session (most of the
    # 10,000 a bridge may hold) would otherwise carry two empty lists and an object it never uses.
    _calls: list[LogRow] | None = None  # ToolCallRecord.as_row of each logged call
    _dropped: DroppedCalls | None = None
    log_bytes: int = 0  # sum of the kept records' sizes
    rollout_id: str | None = None  # Gym's /ng-rollout/<id>/ prefix of the seed, when it had one

    @property
    def calls(self) -> list[ToolCallRecord]:
        """The logged calls, in order (a copy: ``SessionRegistry.record`` adds to the log)."""
        return [ToolCallRecord.from_row(row) for row in self._calls] if self._calls is not None else []

    @property
    def dropped(self) -> DroppedCalls:
        """The calls the log left out (read only)."""
        return self._dropped if self._dropped is not None else DroppedCalls()

    @property
    def row(self) -> dict[str, Any]:
        value = exactjson.loads(self.row_json)
        return value if isinstance(value, dict) else {}

    @property
    def tool_names(self) -> tuple[str, ...]:
        return self.toolset.names

    @property
    def calls_served(self) -> int:
        """Tool calls served for this session, logged or not."""
        return len(self._calls or ()) + self.dropped.count

    @property
    def log_complete(self) -> bool:
        """Whether ``calls`` holds every call served (no cap left one out)."""
        return self.dropped.count == 0

    def incomplete_reason(self) -> str | None:
        """None for a complete log; else one line naming the calls left out and the caps."""
        if self.log_complete:
            return None
        return (
            f"the session log dropped {self.dropped.count} of {self.calls_served} calls ({self.dropped}); "
            "recorded verify needs the whole log"
        )


class SessionRegistry:
    """Open sessions by id, in creation order (expiry is FIFO), with tombstones saying why a closed,
    expired or lost session is gone, and the byte budgets of their call logs."""

    def __init__(
        self,
        ttl_s: float,
        max_sessions: int,
        max_calls_logged: int,
        max_session_log_bytes: int = DEFAULT_MAX_SESSION_LOG_BYTES,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_calls_logged = max_calls_logged
        self.max_session_log_bytes = max_session_log_bytes
        self.max_log_bytes = max_log_bytes
        self.log_bytes = 0  # bytes of call records held by open sessions
        self._open: OrderedDict[str, Session] = OrderedDict()  # in creation order, so expiry is FIFO
        self._tombstones: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._generation = 0

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, sid: object) -> bool:
        """Whether ``sid`` names an open session (expired ones count until the next sweep)."""
        return sid in self._open

    def ensure_room(self, now: float | None = None) -> None:
        """Sweep, then raise ``SessionCapReached`` when ``max_sessions`` sessions are open."""
        self.sweep(now)
        if len(self._open) >= self.max_sessions:
            raise SessionCapReached(
                f"session cap reached ({self.max_sessions} open sessions); retry later or raise max_sessions"
            )

    def create(self, row_json: bytes, cookie: str, toolset: ToolSet, generation: int) -> Session:
        now = time.time()
        self.ensure_room(now)
        session = Session(
            sid=uuid.uuid4().hex,
            row_json=row_json,
            cookie=cookie,
            toolset=toolset,
            generation=generation,
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
            self._bury(session, EXPIRED_REASON)
            raise SessionError(EXPIRED_REASON)
        if session.generation != generation:
            self._bury(session, LOST_REASON)
            raise SessionLost(LOST_REASON)
        return session

    def close(self, sid: str) -> Session | None:
        session = self._open.get(sid)
        if session is not None:
            self._bury(session, CLOSED_REASON)
        return session

    def record(self, session: Session, call: ToolCallRecord) -> None:
        """Log a served call, or leave it out (the log becomes incomplete) when a cap is reached.

        A session no longer open (closed or expired while its call was in flight) logs nothing:
        nobody can read its log any more, and its bytes were already given back."""
        if self._open.get(session.sid) is not session:
            return
        cap = self._cap_reached(session, call.size)
        if cap is not None:
            if session._dropped is None:
                session._dropped = DroppedCalls()
            session._dropped.add(DroppedCall(session.calls_served + 1, call.canonical_name, cap))
            return
        if session._calls is None:
            session._calls = []
        session._calls.append(call.as_row())
        session.log_bytes += call.size
        self.log_bytes += call.size

    def _cap_reached(self, session: Session, size: int) -> str | None:
        """The cap a record of ``size`` bytes would go past, as ``name=value``; None if it fits."""
        if len(session._calls or ()) >= self.max_calls_logged:
            return f"max_calls_logged={self.max_calls_logged}"
        if session.log_bytes + size > self.max_session_log_bytes:
            return f"max_session_log_bytes={self.max_session_log_bytes}"
        if self.log_bytes + size > self.max_log_bytes:
            return f"max_log_bytes={self.max_log_bytes} across all sessions"
        return None

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
            self._bury(session, EXPIRED_REASON)
            evicted += 1
        while self._tombstones:
            sid, (_, until) = next(iter(self._tombstones.items()))
            if until > now and len(self._tombstones) <= self.max_sessions:
                break
            del self._tombstones[sid]
        return evicted

    def _bury(self, session: Session, reason: str) -> None:
        """Close an open session for good: keep why as a tombstone, give its log bytes back."""
        if self._open.pop(session.sid, None) is session:
            self.log_bytes -= session.log_bytes
        self._tombstones[session.sid] = (reason, session.expires_at)
