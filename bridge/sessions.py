"""Per-rollout sessions: the registry that maps a session id to its upstream state, under one byte
budget.

``/seed_session`` creates a ``Session`` (seeded row as compact JSON bytes, the upstream cookie,
the session's interned tool set, the upstream generation it was built on, expiry) and the token
that names it. A session's life follows a rollout as Gym drives it:

- **unfinished** from its seed to its first answered ``/verify`` (``finish``): it serves tool
  calls, counts against ``max_sessions`` and expires ``ttl_s`` after its seed (its token's life);
- **finished** after that: it keeps what a repeated ``/verify`` and provenance need (row, upstream
  cookie, token, call log), drops its retry records, serves no more tool calls, never counts
  against ``max_sessions``, and is the first released when the budget needs room;
- **ended** when closed, expired, released under the budget (evicted) or lost (the upstream
  restarted since the seed): a tombstone names which, when and why on later use, until it too is
  released (tombstones hold at most an eighth of the budget).

Every byte a session holds (``Session.size``: a fixed overhead, row, cookie, token, call log,
retry records) is charged to ``state_bytes``, kept under ``budget_bytes``: a seed that does not fit
releases finished sessions (oldest first), then tombstones; past that it is refused
(``SessionBudgetFull``): unfinished sessions are never released to make room. Sessions the registry
ended by itself (expired or evicted) are queued in ``released`` for the service to release on the
upstream too.

Call logs are bounded as before: at most ``max_calls_logged`` records and ``max_session_log_bytes``
per session, ``max_log_bytes`` across sessions; a call past a cap (or past the budget) still runs,
its record is left out, the log is incomplete and ``recorded`` verify refuses naming the dropped
calls (``Session.incomplete_reason``).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from bridge import exactjson
from bridge.calllog import LogRow, ToolCallRecord
from bridge.settings import DEFAULT_STATE_BUDGET_BYTES
from bridge.tools import ToolSet

DEFAULT_MAX_SESSION_LOG_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_LOG_BYTES = 256 * 1024 * 1024
DROPPED_SHOWN = 3  # dropped calls named individually; the rest are counted
# Bytes charged for a session besides its row, cookie, token and log: the objects holding them.
# Measured with tracemalloc in a bridge serving counter rollouts (seed, initialize, two calls,
# verify): a finished session holds about 2.5 KB, of which about 1.2 KB is its row, cookie, token
# and log, so the budget follows what the process really holds.
SESSION_OVERHEAD = 1280
SEED_HEADROOM = 1024  # the cookie and token a seed will add, charged before they exist
TOMBSTONE_BYTES = 200  # an id, a reason and two floats in an ordered dict
TOMBSTONE_SHARE = 8  # tombstones hold at most 1/8 of the budget

# Why a session ended (the tombstone's kind).
CLOSED, EXPIRED, EVICTED, LOST = "closed", "expired", "evicted", "lost"

LOST_REASON = (
    "session lost: the upstream resources server restarted after this session was seeded, "
    "its state is gone; seed a new session"
)


def _at(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def ended_reason(sid: str, kind: str, when: float, budget: int) -> str:
    """One line naming a session that ended: which, when and why."""
    if kind == LOST:
        return LOST_REASON
    why = {
        CLOSED: "closed by /close_session",
        EXPIRED: "expired (session_ttl_s after its seed)",
        EVICTED: f"finished, then released to make room under state_budget_bytes={budget}",
    }[kind]
    return f"session {sid} ended at {_at(when)}: {why}; seed a new session"


class SessionError(Exception):
    """The session a request names cannot serve it; str(exc) is the one-line reason."""


class SessionLost(SessionError):
    """The upstream restarted after the session was seeded: its state is gone."""


class SessionEnded(SessionError):
    """The session was closed, expired, released or finished: named, never re-created. ``why`` is
    the tombstone's kind (``EXPIRED``, ...), None for a finished session."""

    def __init__(self, reason: str, why: str | None = None) -> None:
        super().__init__(reason)
        self.why = why


class SessionCapReached(Exception):
    pass


class SessionBudgetFull(Exception):
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
    # The log and its dropped calls are made by the first record: an idle session would otherwise
    # carry two empty lists and an object it never uses.
    _calls: list[LogRow] | None = None  # ToolCallRecord.as_row of each logged call
    _dropped: DroppedCalls | None = None
    log_bytes: int = 0  # sum of the kept records' sizes
    rollout_id: str | None = None  # Gym's /ng-rollout/<id>/ prefix of the seed, when it had one
    size: int = 0  # bytes charged to the registry's budget
    finished_at: float | None = None  # when its first /verify was answered
    retries: dict[str, Any] | None = None  # bridge.retries.Attempt by retry key, while unfinished
    in_flight: set[Any] | None = None  # the tasks of its tool calls still running (a /verify waits)

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


@dataclass(frozen=True, slots=True)
class Tombstone:
    kind: str  # CLOSED, EXPIRED, EVICTED or LOST
    at: float  # when it ended
    until: float  # when its token expires: nobody can name it after that


class SessionRegistry:
    """Unfinished sessions in creation order (expiry is FIFO), finished ones in the order they
    finished (released oldest first), and tombstones of ended ones, all under one byte budget."""

    def __init__(
        self,
        ttl_s: float,
        max_sessions: int,
        max_calls_logged: int,
        max_session_log_bytes: int = DEFAULT_MAX_SESSION_LOG_BYTES,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        budget_bytes: int = DEFAULT_STATE_BUDGET_BYTES,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_calls_logged = max_calls_logged
        self.max_session_log_bytes = max_session_log_bytes
        self.max_log_bytes = max_log_bytes
        self.budget_bytes = budget_bytes
        self.log_bytes = 0  # bytes of call records held by unfinished sessions
        self.state_bytes = 0  # every byte charged: sessions of both kinds and tombstones
        self._open: OrderedDict[str, Session] = OrderedDict()  # unfinished, in creation order
        self._finished: OrderedDict[str, Session] = OrderedDict()  # in the order they finished
        self._tombstones: OrderedDict[str, Tombstone] = OrderedDict()
        self._generation = 0
        self.released: list[Session] = []  # ended here (expired, evicted): the service releases upstream
        self.ended: dict[str, int] = {CLOSED: 0, EXPIRED: 0, EVICTED: 0, LOST: 0}  # counts, for metrics

    def __len__(self) -> int:
        """Unfinished sessions (what ``max_sessions`` bounds)."""
        return len(self._open)

    def unfinished(self) -> list[Session]:
        """The unfinished sessions, oldest first (a copy)."""
        return list(self._open.values())

    def __contains__(self, sid: object) -> bool:
        """Whether ``sid`` names a session still held, unfinished or finished."""
        return sid in self._open or sid in self._finished

    @property
    def finished(self) -> int:
        return len(self._finished)

    # -- seeding -----------------------------------------------------------------------------------

    def ensure_room(self, row_bytes: int = 0, now: float | None = None) -> None:
        """Sweep, then make room for a seed of ``row_bytes``: ``SessionCapReached`` when
        ``max_sessions`` sessions are unfinished, ``SessionBudgetFull`` when unfinished sessions
        alone leave no room in the budget (finished sessions and tombstones are released first)."""
        self.sweep(now)
        if len(self._open) >= self.max_sessions:
            raise SessionCapReached(
                f"session cap reached ({self.max_sessions} unfinished sessions); finished rollouts do not "
                "count: retry later or raise max_sessions"
            )
        if not self._make_room(SESSION_OVERHEAD + SEED_HEADROOM + row_bytes):
            held = self.state_bytes - len(self._tombstones) * TOMBSTONE_BYTES
            raise SessionBudgetFull(
                f"session state budget full: {len(self._open)} unfinished sessions hold {held} of "
                f"state_budget_bytes={self.budget_bytes}; retry later or raise state_budget_bytes"
            )

    def create(self, row_json: bytes, cookie: str, toolset: ToolSet, generation: int) -> Session:
        now = time.time()
        self.ensure_room(len(row_json), now)
        session = Session(
            sid=uuid.uuid4().hex,
            row_json=row_json,
            cookie=cookie,
            toolset=toolset,
            generation=generation,
            expires_at=now + self.ttl_s,
        )
        self._open[session.sid] = session
        self.charge(session, SESSION_OVERHEAD + len(row_json) + len(cookie))
        return session

    def set_token(self, session: Session, token: str) -> None:
        self.charge(session, len(token) - len(session.token))
        session.token = token

    def set_cookie(self, session: Session, cookie: str) -> None:
        """The session's upstream cookie jar after a call refreshed it."""
        if cookie is not session.cookie:
            self.charge(session, len(cookie) - len(session.cookie))
            session.cookie = cookie

    def charge(self, session: Session, delta: int) -> None:
        """Count ``delta`` more bytes held by ``session`` (negative: given back); a session no
        longer held is not charged."""
        if self._held(session):
            session.size += delta
            self.state_bytes += delta

    def _held(self, session: Session) -> bool:
        return self._open.get(session.sid) is session or self._finished.get(session.sid) is session

    # -- lookups -----------------------------------------------------------------------------------

    def get(self, sid: str, generation: int, finished_ok: bool = False) -> Session:
        """The session ``sid`` names; a finished one only with ``finished_ok`` (repeated verify,
        close). ``SessionError`` (``SessionLost``, ``SessionEnded``) naming why otherwise."""
        session = self._open.get(sid) or self._finished.get(sid)
        if session is None:
            tomb = self._tombstones.get(sid)
            if tomb is None:
                raise SessionError(f"unknown session {sid} (never seeded here, or released)")
            reason = ended_reason(sid, tomb.kind, tomb.at, self.budget_bytes)
            raise SessionLost(reason) if tomb.kind == LOST else SessionEnded(reason, tomb.kind)
        now = time.time()
        if session.expires_at <= now:
            self._end(session, EXPIRED, now)
            raise SessionEnded(ended_reason(sid, EXPIRED, now, self.budget_bytes), EXPIRED)
        if session.generation != generation:
            self._end(session, LOST, now)
            raise SessionLost(LOST_REASON)
        if session.finished_at is not None and not finished_ok:
            raise SessionEnded(
                f"session {sid} finished at {_at(session.finished_at)} (its /verify was answered): its "
                "tools no longer run; seed a new session for another rollout"
            )
        return session

    # -- life --------------------------------------------------------------------------------------

    def finish(self, session: Session) -> None:
        """The session's ``/verify`` was answered: it keeps what a repeated verify needs, drops its
        retry records and stops counting against ``max_sessions``."""
        if self._open.get(session.sid) is not session:
            return
        del self._open[session.sid]
        self.log_bytes -= session.log_bytes
        self._finished[session.sid] = session
        session.finished_at = time.time()
        if session.retries is not None:
            retries, session.retries = session.retries, None
            self.charge(session, -sum(attempt.size for attempt in retries.values()))

    def close(self, sid: str) -> Session | None:
        session = self._open.get(sid) or self._finished.get(sid)
        if session is not None:
            self._end(session, CLOSED, time.time())
        return session

    def record(self, session: Session, call: ToolCallRecord) -> None:
        """Log a served call, or leave it out (the log becomes incomplete) when a cap is reached.

        A session no longer unfinished (ended or verified while its call was in flight) logs
        nothing: its bytes were already given back, and its verify did not see the call."""
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
        self.charge(session, call.size)

    def _cap_reached(self, session: Session, size: int) -> str | None:
        """The cap a record of ``size`` bytes would go past, as ``name=value``; None if it fits."""
        if len(session._calls or ()) >= self.max_calls_logged:
            return f"max_calls_logged={self.max_calls_logged}"
        if session.log_bytes + size > self.max_session_log_bytes:
            return f"max_session_log_bytes={self.max_session_log_bytes}"
        if self.log_bytes + size > self.max_log_bytes:
            return f"max_log_bytes={self.max_log_bytes} across all sessions"
        if not self._make_room(size):
            return f"state_budget_bytes={self.budget_bytes}"
        return None

    def sweep(self, now: float | None = None, generation: int | None = None) -> int:
        """End expired sessions, sessions of a replaced upstream, and forget stale tombstones.

        Returns how many sessions were ended."""
        now = time.time() if now is None else now
        ended = 0
        if generation is not None and generation != self._generation:
            self._generation = generation
            for session in [
                s for s in (*self._open.values(), *self._finished.values()) if s.generation != generation
            ]:
                self._end(session, LOST, now)
                ended += 1
        for held in (self._open, self._finished):  # both nearly in expiry order: stop at the first alive
            while held:
                session = next(iter(held.values()))
                if session.expires_at > now:
                    break
                self._end(session, EXPIRED, now)
                ended += 1
        while self._tombstones:
            sid, tomb = next(iter(self._tombstones.items()))
            if tomb.until > now:
                break
            self._forget(sid)
        return ended

    def _make_room(self, needed: int) -> bool:
        """Release finished sessions, then tombstones, oldest first, until ``needed`` more bytes fit."""
        now = time.time()
        while self.state_bytes + needed > self.budget_bytes:
            if self._finished:
                self._end(next(iter(self._finished.values())), EVICTED, now)
            elif self._tombstones:
                self._forget(next(iter(self._tombstones)))
            else:
                return False
        return True

    def _end(self, session: Session, kind: str, now: float) -> None:
        """End a held session for good: its bytes given back, a tombstone saying why; sessions the
        registry ends by itself are queued in ``released``."""
        sid = session.sid
        if self._open.get(sid) is session:
            del self._open[sid]
            self.log_bytes -= session.log_bytes
        elif self._finished.get(sid) is session:
            del self._finished[sid]
        else:
            return
        self.state_bytes -= session.size
        self.ended[kind] += 1
        if kind in (EXPIRED, EVICTED):
            self.released.append(session)
        self._tombstones[sid] = Tombstone(kind, now, session.expires_at)
        self.state_bytes += TOMBSTONE_BYTES
        limit = self.budget_bytes // TOMBSTONE_SHARE
        while len(self._tombstones) * TOMBSTONE_BYTES > limit and self._tombstones:
            self._forget(next(iter(self._tombstones)))

    def _forget(self, sid: str) -> None:
        del self._tombstones[sid]
        self.state_bytes -= TOMBSTONE_BYTES

    def take_released(self) -> list[Session]:
        """The sessions ended here since the last call (expired, evicted), for upstream release."""
        released, self.released = self.released, []
        return released
