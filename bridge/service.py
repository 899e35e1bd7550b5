"""The service: sessions, tokens, tools and calls, as plain values and exceptions.

``Bridge`` owns the settings, the upstream, the session registry, the token signer and the tool
sets. A request flows one way through it: the HTTP layer parses the request, ``authorize`` turns a
token into its session (or a ``Rejected`` with the reason and its kind, before any upstream
contact), ``seed`` / ``call_tool`` / ``verify`` / ``forward`` talk to the upstream with the
session's cookie jar, and the HTTP layer renders the outcome (``bridge.outcomes``). Nothing here
chooses the HTTP status of a refusal (``Rejected`` carries a kind; a ``ToolOutcome`` carries the
upstream's status, or the gateway status a call it never answered gets), nor knows routing, cookies
of its own or JSON-RPC framing; name resolution and verify normalization are ``bridge.scoring``'s,
reached for a verify through ``bridge.verifying`` (the body prepared, the upstream's answer finished).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind

from bridge import admission, discovery, exactjson, outcomes, retries, rollouts, tracing, verifying
from bridge import tools as tools_mod
from bridge.admission import Rejected
from bridge.audit import AuditLog
from bridge.calllog import ToolCallRecord
from bridge.draining import RETRY_AFTER_S, Drain
from bridge.metrics import Metrics
from bridge.outcomes import ToolOutcome, VerifyOutcome
from bridge.peers import Peers, default_peers
from bridge.releasing import Releaser
from bridge.retries import RetryKey, RetryRefused
from bridge.sessions import (
    Session,
    SessionBudgetFull,
    SessionCapReached,
    SessionRegistry,
)
from bridge.settings import Settings, advertise_url
from bridge.tokens import HEADER, Claims, ForeignIssuer, TokenSigner
from bridge.tools import InvalidToolName, ToolSets
from bridge.upstream import (
    TimeLimit,
    Upstream,
    UpstreamRequestRefused,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from bridge.upstream import mcp as upstream_mcp
from bridge.upstream.cookies import request_headers

log = logging.getLogger("gym_mcp_bridge")

TYPED_SEED_KEY = "resources_session_id"


def _no_room(exc: SessionCapReached | SessionBudgetFull) -> Rejected:
    """The 503 refusal of a seed that does not fit: over ``max_sessions``, or the state budget."""
    return Rejected(str(exc), "cap" if isinstance(exc, SessionCapReached) else "budget", retry_after=5)


OTHER_TOOLS_LABEL = "(row tool)"  # metrics label of every tool outside the upstream's OpenAPI set


class Bridge:
    """The service every surface calls: it owns the settings, upstream, sessions, token signer and
    tool sets; ``seed``, ``authorize``, ``call_tool``, ``verify`` and ``forward`` take plain values
    and return plain values or raise ``Rejected`` (a reason and its kind, never an HTTP status)."""

    def __init__(
        self, settings: Settings, upstream: Upstream | None = None, keys: list[str] | None = None
    ) -> None:
        self.settings = settings
        self.upstream = upstream or Upstream(settings)
        self.sessions = SessionRegistry(
            settings.session_ttl_s,
            settings.max_sessions,
            settings.max_calls_logged,
            settings.max_session_log_bytes,
            settings.max_log_bytes,
            settings.resolved_state_budget(),
        )
        self.metrics = Metrics()
        self.releaser = Releaser(self.sessions, self.upstream, self.metrics)
        self.started_at = time.time()
        self.bound: tuple[str, int] = (settings.host, settings.port)
        self.toolsets: ToolSets | None = None
        self.upstream_routes: frozenset[str] = frozenset()
        self.provenance_places: frozenset[str] = frozenset()  # where its /verify takes Gym's sidecar
        self.mcp_native: frozenset[str] = frozenset()  # tools served on the upstream's own /mcp
        self.rollout_prefix = False  # the upstream routes /ng-rollout/<id>/<path> as /<path> (Gym >= 0.7)
        self.signer: TokenSigner | None = None
        self.keys = keys if keys is not None else settings.signing_keys()[0]
        self.by_resources_id: dict[str, list[str]] = {}  # Gym >= 0.7 typed seeds: id -> session ids
        self.audit = (
            AuditLog(settings.audit_log, settings.audit_log_arguments) if settings.audit_log else None
        )
        self._peers: Peers | None = None
        self.drain = Drain()  # after SIGTERM: no new sessions, the open ones served to their end

    # -- startup --------------------------------------------------------------------------------

    @property
    def advertise_url(self) -> str:
        return advertise_url(self.settings, self.bound)

    async def start(self) -> None:
        """Start or reach the upstream (unless already up), then load its tools. Raises UpstreamStartError."""
        if not self.upstream.ready:
            await self.upstream.start()
        await self.load_tools()
        self.signer = TokenSigner(self.keys, issuer=self.advertise_url, audience=self.upstream.server_name)
        log.info("other replicas' sessions are forwarded to peers: %s", self.peers)

    @property
    def peers(self) -> Peers:
        """The replicas whose sessions are relayed to them (built on first use: the default derives
        from the advertise URL, which depends on the bound port)."""
        if self._peers is None:
            patterns = self.settings.peers
            self._peers = Peers(default_peers(self.advertise_url) if patterns is None else patterns)
        return self._peers

    async def load_tools(self) -> None:
        offer = await discovery.discover(self.upstream, self.settings)
        self.toolsets = offer.toolsets
        self.upstream_routes = offer.routes
        self.provenance_places = offer.provenance_places
        self.mcp_native = offer.mcp_native
        self.rollout_prefix = offer.rollout_prefix

    def _path(self, path: str, rollout: str | None) -> str:
        """``path`` under ``/ng-rollout/<rollout>`` when the upstream strips it (the id passed
        ``bridge.http.prefixes``'s check), else as it is."""
        return f"/ng-rollout/{rollout}{path}" if rollout and self.rollout_prefix else path

    def not_ready_reason(self) -> str | None:
        if not self.upstream.ready:
            return self.upstream.not_ready_reason or "upstream not ready"
        if self.toolsets is None or self.signer is None:
            return "tool list not loaded yet"
        return None

    # -- sessions -------------------------------------------------------------------------------

    def authorize(self, token: str | None, tool: str | None = None, finished_ok: bool = False) -> Session:
        """The session a token names; Rejected (without touching the upstream) otherwise. A finished
        session (its /verify answered) serves only ``finished_ok`` requests: a repeated verify, close."""
        return self.admit(self.verify_token(token), tool, finished_ok)

    def verify_token(self, token: str | None) -> Claims:
        """The verified claims of a session token (``admission.verify_token``). A caller that verified
        the token once passes the claims on to ``admit`` rather than verifying it again."""
        return admission.verify_token(self.signer, self.peers, token)

    def admit(self, claims: Claims, tool: str | None = None, finished_ok: bool = False) -> Session:
        """The session verified ``claims`` name, and ``tool`` in its allow-list (``admission.admit``)."""
        boot = self.signer.boot if self.signer is not None else None
        return admission.admit(
            self.sessions, self.upstream.generation, self.started_at, claims, tool, finished_ok, boot
        )

    def foreign(self, exc: ForeignIssuer) -> Rejected:
        """Another replica's verified token: ``Foreign`` when its issuer is a peer, else the refusal."""
        return admission.foreign(self.peers, exc)

    def mcp_metadata(self, session: Session) -> dict[str, Any]:
        return {
            "server_name": self.upstream.server_name,
            "url_path": f"{urlsplit(self.advertise_url).path.rstrip('/')}/mcp",
            "url": f"{self.advertise_url.rstrip('/')}/mcp",
            "transport": "http",
            "headers": {HEADER: session.token},
            "tool_names": list(session.tool_names),
        }

    async def seed(
        self, body: bytes, row: dict[str, Any], cookie_header: str, rollout: str | None = None
    ) -> tuple[UpstreamResponse, Session | None]:
        """Forward a seed; on success create the session: (the upstream's answer, the session). A row
        declaring a tool named against the MCP rule is refused first (the name would be a request line)."""
        if self.toolsets is None or self.signer is None:
            raise Rejected(self.not_ready_reason() or "not ready", "not_ready", retry_after=1)
        if self.drain.active:
            raise Rejected(self.drain.reason(len(self.sessions)), "draining", retry_after=RETRY_AFTER_S)
        try:
            row_tools = tools_mod.from_row(row)
        except InvalidToolName as exc:
            raise Rejected(f"row refused: {exc}", "row_tools") from exc
        try:
            self.sessions.ensure_room(len(body))  # before the upstream sees the seed; ``create`` checks again
        except (SessionCapReached, SessionBudgetFull) as exc:
            raise _no_room(exc) from exc
        generation = self.upstream.generation
        if "seed_session" in self.upstream_routes or self.toolsets.catch_all:
            self.drain.seeding += 1  # a drain that begins now waits for the session this makes
            try:
                response = await self.upstream.post(
                    self._path("/seed_session", rollout), body, request_headers(cookie_header)
                )
            finally:
                self.drain.seeding -= 1
        else:  # Gym's GymnasiumServer has no /seed_session: its first call (/reset) opens its session
            response = UpstreamResponse(200, [(b"content-type", b"application/json")], b"{}")
        if not response.is_success:
            return response, None
        try:
            session = self.sessions.create(
                body, response.cookie_jar(cookie_header), self.toolsets.for_row(row_tools), generation
            )
        except (SessionCapReached, SessionBudgetFull) as exc:
            raise _no_room(exc) from exc
        self.sessions.set_token(
            session, self.signer.issue(session.sid, session.tool_names, self.settings.session_ttl_s)
        )
        session.rollout_id = rollout
        if self.mcp_native:  # keep the upstream's own MCP token: its tools act on the session it names
            with contextlib.suppress(ValueError):
                session.upstream_headers = upstream_mcp.session_headers(response.json())
        resources_id = row.get(TYPED_SEED_KEY)
        if isinstance(resources_id, str):
            self.by_resources_id.setdefault(resources_id, []).append(session.sid)
        self.metrics.sessions_created.inc()
        self.count_sessions()
        return response, session

    def drain_reason(self) -> str | None:
        """Why ``/readyz`` is 503 while this replica drains (None: not draining)."""
        return self.drain.reason(len(self.sessions)) if self.drain.active else None

    async def drain_sessions(self, grace_s: float) -> list[Session]:
        """SIGTERM: refuse new seeds, serve the sessions held until each is finished or ``grace_s``
        has passed; the ones still unfinished then (lost: named in the log, counted in /metrics)."""
        self.drain.begin(grace_s)

        def unfinished() -> list[Session]:
            self.sessions.sweep(generation=self.upstream.generation)  # expired, or the upstream's lost
            return self.sessions.unfinished()

        try:
            left = await self.drain.wait(unfinished)
        finally:  # over, or cut by a second signal: the process stops next
            self.drain.stopped = True
        if left:
            self.metrics.sessions_ended.labels("shutdown").inc(len(left))
        return left

    def close(self, session: Session) -> None:
        self.sessions.close(session.sid)
        self.count_sessions()

    def close_resources_id(self, resources_id: str) -> list[str]:
        """Revoke every session seeded with this typed ``resources_session_id``; their ids."""
        sids = self.by_resources_id.pop(resources_id, [])
        for sid in sids:
            self.sessions.close(sid)
        self.count_sessions()
        return sids

    # -- upstream calls -------------------------------------------------------------------------

    async def call_tool(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any],
        transport: str,
        emitted: str | None = None,
        rollout: str | None = None,
        retry: RetryKey | None = None,
    ) -> ToolOutcome:
        """Call ``POST /<name>`` with the session's cookie and the arguments as sent (no schema check
        here: the model reads the upstream's own answer, its validation errors included, as over plain
        HTTP), capture cookie refreshes, log the call. The call runs in a task of its own: a caller
        that goes away does not cancel it (the upstream may have applied it; the log must say so), and a
        ``/verify`` of the session waits for it. A
        call with a ``retry`` key runs once per key in its session (``bridge.retries``): a repeat gets
        the first answer, waiting for it while it runs."""
        if name not in session.toolset.tools:
            allowed = ", ".join(session.tool_names) or "none"
            raise Rejected(f"unknown tool {name!r} for this session (tools: {allowed})", "unknown_tool")
        sent = exactjson.dumps(arguments)  # once: the upstream's body, the log's copy, the retry's identity
        first = None
        if retry is not None:
            digest = retries.fingerprint(name, sent)
            try:
                first = retries.previous(session, retry, name, digest)
            except RetryRefused as exc:
                raise Rejected(str(exc), "retry") from exc
        if first is not None and first.answer is not None and retry is not None:
            self.metrics.retries.labels(retry.matched_by).inc()
            answer = first.answer
        else:
            answer = asyncio.ensure_future(
                self._call_tool(session, name, arguments, sent, transport, emitted, rollout)
            )
            if session.in_flight is None:  # held here until it ends: a /verify of the session waits for it
                session.in_flight = set()
            session.in_flight.add(answer)
            answer.add_done_callback(session.in_flight.discard)
            if retry is not None:
                retries.remember(self.sessions, session, retry, name, digest, answer)
        try:
            return await asyncio.shield(answer)
        except asyncio.CancelledError:
            self._refuse_if_stopped()
            raise

    def _refuse_if_stopped(self) -> None:
        """Inside ``except CancelledError``: a wait uvicorn cut because this replica stops is the
        session's loss in Gym's words, as for a restarted replica, not a bare 500."""
        if self.drain.stopped:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            raise Rejected(self.drain.stopped_reason(), "lost") from None

    async def _call_tool(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any],
        sent: bytes,
        transport: str,
        emitted: str | None,
        rollout: str | None,
    ) -> ToolOutcome:
        """One upstream call: ``POST /<name>`` with ``sent`` (the arguments as JSON), or for an
        MCP-native upstream ``tools/call`` on its own ``/mcp`` with the session's upstream token (the
        model reads its result as it came); then the call is logged (with the arguments as the
        upstream received them) and counted."""
        started, clock = time.time(), time.perf_counter()
        native = name in self.mcp_native
        try:
            if native:  # within tool_timeout_s of the upstream's time, when the operator set one
                answer = await upstream_mcp.call(
                    self.upstream, session.upstream_headers or {}, name, arguments
                )
                outcome = outcomes.mcp_answered(*answer)
            else:
                path = self._path(f"/{name}", rollout or session.rollout_id)
                response = await self.upstream.post(path, sent, request_headers(session.cookie))
                outcome = outcomes.answered(response)
                self.sessions.set_cookie(session, response.cookie_jar(session.cookie))
        except (UpstreamTimeout, UpstreamUnavailable, UpstreamRequestRefused) as exc:
            outcome = outcomes.failed(exc)
        elapsed = time.perf_counter() - clock
        logged = None if native else sent  # an MCP-native upstream got the arguments in its own envelope
        record = ToolCallRecord.served(
            name, emitted, arguments, outcome.message, outcome.is_error, started, elapsed, logged
        )
        self.sessions.record(session, record)
        label = (
            name if self.toolsets is not None and name in self.toolsets.openapi.tools else OTHER_TOOLS_LABEL
        )
        result = outcomes.label(outcome)
        self.metrics.tool_call(label, transport, result, elapsed)
        if tracing.ENABLED or self.audit is not None:
            digest = tracing.session_hash(session.sid)
            shown = rollouts.label(session.rollout_id) if session.rollout_id else None  # None: not set
            attributes = {"gym.tool": emitted or name, "gym.tool.canonical": name, "gym.outcome": result}
            tracing.annotate(**attributes, **{"gym.session": digest, "gym.rollout_id": shown})
            if self.audit is not None:
                self.audit.record(digest, name, emitted or name, transport, result, elapsed, arguments, shown)
        return outcome

    async def forward(
        self,
        path: str,
        body: bytes,
        cookie_header: str,
        timeout: TimeLimit = "tool_timeout_s",
        rollout: str | None = None,
    ) -> UpstreamResponse:
        """POST to the upstream with the caller's cookie; ``timeout`` as ``Upstream.post`` takes it
        (by default the operator's ``tool_timeout_s``, named in a refusal; unset: no limit)."""
        path = self._path(path, rollout)
        return await self.upstream.post(path, body, request_headers(cookie_header), timeout=timeout)

    async def verify(
        self, session: Session | None, body: dict[str, Any], cookies: str, rollout: str | None = None
    ) -> VerifyOutcome:
        """Score ``body`` with the upstream's own ``/verify`` under canonical names (``scoring.verify``):
        the upstream's answer as it came when it is no JSON object, else with the caller's names, the
        ``_bridge`` report and, for a session, the signed provenance of the calls it scored."""
        attributes = {"gym.session": tracing.session_hash(session.sid)} if session is not None else {}
        asked = rollout  # the verify's own /ng-rollout/<id>/, if any
        rollout = rollout or (session.rollout_id if session is not None else None)
        if rollout:
            attributes["gym.rollout_id"] = rollouts.label(rollout)
        try:
            with tracing.span("verify", SpanKind.INTERNAL, **attributes):
                started = time.perf_counter()
                if session is not None and session.in_flight:
                    # a call whose client gave up (cancelled, disconnected, timed out) still runs upstream:
                    # the score and the log wait for what it applied
                    await asyncio.wait(set(session.in_flight))
                if (
                    self.toolsets is not None
                    and not self.toolsets.catch_all
                    and "verify" not in self.upstream_routes
                ):
                    raise Rejected(
                        "this upstream has no /verify: it scores inside its own tools "
                        "(a Gym GymnasiumServer returns each step's reward from its 'step' tool)",
                        "no_verify",
                    )
                aliases = {self.upstream.server_name, *self.settings.server_aliases}
                upstream_tools = self.toolsets.openapi.names if self.toolsets is not None else ()
                places = self.provenance_places
                prepared = verifying.prepared(body, session, aliases, upstream_tools, places, self.metrics)
                answer = await self.forward(
                    "/verify",
                    exactjson.dumps(prepared.scoring),
                    session.cookie if session is not None else cookies,
                    timeout="verify_timeout_s",
                    rollout=rollout,
                )
                self.metrics.verify_latency.observe(time.perf_counter() - started)
                if answer.is_success and session is not None:  # the rollout is finished: see bridge.sessions
                    self.sessions.finish(session)
                    self.count_sessions()
                return verifying.answered(answer, prepared, session, asked, self.keys[0], self.metrics)
        except asyncio.CancelledError:
            self._refuse_if_stopped()
            raise

    def count_sessions(self) -> None:
        """Session gauges from the registry; the sessions it ended by itself are released on the
        upstream too when it has ``/close_session`` (``bridge.releasing``)."""
        routed = "close_session" in self.upstream_routes
        self.releaser.settle(lambda s: self._path("/close_session", s.rollout_id) if routed else None)

    async def sweep_forever(self, interval_s: float = 5.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self.sessions.sweep(generation=self.upstream.generation)
            for resources_id, sids in list(self.by_resources_id.items()):
                open_sids = [sid for sid in sids if sid in self.sessions]
                if open_sids:
                    self.by_resources_id[resources_id] = open_sids
                else:
                    del self.by_resources_id[resources_id]
            self.count_sessions()
            self.metrics.upstream_up.set(1 if self.not_ready_reason() is None else 0)
            self.metrics.upstream_restarts.set(self.upstream.restarts)
