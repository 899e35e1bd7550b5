"""The bridge's shared state and the operations both surfaces (Gym REST and MCP) perform.

``Bridge`` owns the settings, the upstream, the session registry, the token signer and the tool
sets. A request flows one way through it: the surface parses the request, ``authorize`` turns a
token into its session (or a ``Rejected`` with the reason, before any upstream contact),
``seed`` / ``call_tool`` / ``forward`` talk to the upstream with the session's cookie, and the
surface renders the outcome. Nothing here knows about HTTP routing or JSON-RPC framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import secrets
import time
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

import orjson

from bridge import tools as tools_mod
from bridge import tracing, upstream_mcp
from bridge.audit import AuditLog
from bridge.calllog import ToolCallRecord
from bridge.forwarding import Forwarding
from bridge.metrics import Metrics
from bridge.sessions import Session, SessionCapReached, SessionError, SessionLost, SessionRegistry
from bridge.settings import Settings, advertise_url
from bridge.tokens import HEADER, ForeignIssuer, TokenError, TokenSigner
from bridge.tools import InvalidToolName, ToolSets
from bridge.upstream import (
    Upstream,
    UpstreamRequestRefused,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamUnavailable,
)

log = logging.getLogger("gym_mcp_bridge")

BRIDGE_COOKIE = "gym_mcp_bridge_session"
TYPED_SEED_KEY = "resources_session_id"


class Rejected(Exception):
    """Refused before reaching the upstream. ``status`` is the HTTP code on the REST surface."""

    def __init__(self, reason: str, status: int, kind: str, retry_after: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.kind = kind
        self.retry_after = retry_after


class Foreign(Rejected):
    """A verified token issued by another replica (``owner``) inside the configured peers: the surface
    forwards the request to it (``Bridge.forwarding``); where it cannot, this is the refusal."""

    def __init__(self, reason: str, owner: str) -> None:
        super().__init__(reason, 401, "foreign")
        self.owner = owner


@dataclass(slots=True)
class ToolOutcome:
    status: int
    body: bytes
    content_type: str
    is_error: bool
    set_cookies: list[str]
    message: str  # what a model reads: the upstream's text, or why the call failed
    value: Any = None  # the upstream's JSON answer, when it is JSON


OTHER_TOOLS_LABEL = "(row tool)"  # metrics label of every tool outside the upstream's OpenAPI set


def merge_cookies(jar: str, set_cookies: list[str], now: float | None = None) -> str:
    """The ``Cookie`` header after the upstream's ``Set-Cookie`` lines, as a browser keeps it: each
    line replaces only the cookie of its own name, and one that expires it (``Max-Age`` <= 0 or an
    ``Expires`` in the past) removes it."""
    cookies: dict[str, str] = {}
    for pair in jar.split(";"):
        name, _, value = pair.strip().partition("=")
        if name:
            cookies[name] = value
    moment = time.time() if now is None else now
    for line in set_cookies:
        pair, *attributes = line.split(";")
        name, _, value = pair.strip().partition("=")
        if not name:
            continue
        cookies.pop(name, None)  # a replaced cookie moves to the end, as in a browser's header
        if not _expired(attributes, moment):
            cookies[name] = value
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


def _expired(attributes: list[str], now: float) -> bool:
    for attribute in attributes:
        key, _, value = attribute.strip().partition("=")
        key = key.lower()
        if key == "max-age":
            try:
                return int(value.strip()) <= 0
            except ValueError:
                continue
        if key == "expires":
            try:
                return email.utils.parsedate_to_datetime(value.strip()).timestamp() <= now
            except (TypeError, ValueError):
                continue
    return False


def strip_bridge_cookie(cookie_header: str | None) -> str:
    if not cookie_header:
        return ""
    jar = SimpleCookie()
    try:
        jar.load(cookie_header)
    except Exception:
        return cookie_header
    return "; ".join(f"{k}={m.coded_value}" for k, m in jar.items() if k != BRIDGE_COOKIE)


class Bridge:
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
        )
        self.metrics = Metrics()
        self.started_at = time.time()
        self.bound: tuple[str, int] = (settings.host, settings.port)
        self.toolsets: ToolSets | None = None
        self.upstream_routes: frozenset[str] = frozenset()
        self.mcp_native: frozenset[str] = frozenset()  # tools served on the upstream's own /mcp
        self.signer: TokenSigner | None = None
        self.keys = keys if keys is not None else settings.signing_keys()[0]
        self.by_resources_id: dict[str, list[str]] = {}  # Gym >= 0.7 typed seeds: id -> session ids
        self.audit = (
            AuditLog(settings.audit_log, settings.audit_log_arguments) if settings.audit_log else None
        )
        self._forwarding: Forwarding | None = None

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
        log.info("other replicas' sessions are forwarded to peers: %s", self.forwarding.peers)

    @property
    def forwarding(self) -> Forwarding:
        """Forwarding to the replica that owns a session (built on first use: the advertise URL
        depends on the bound port)."""
        if self._forwarding is None:
            settings = self.settings
            self._forwarding = Forwarding(
                self.advertise_url,
                settings.peers,
                settings.tool_timeout_s,
                settings.verify_timeout_s,
                self.metrics.registry,
            )
        return self._forwarding

    async def load_tools(self) -> None:
        spec = await self.upstream.get_json("/openapi.json")
        openapi, catch_all, skipped = tools_mod.from_openapi(spec)
        for problem in skipped:
            log.warning("upstream route skipped, not served as a tool: %s", problem)
        self.upstream_routes = frozenset(p.strip("/") for p in spec.get("paths", {}))
        native = await upstream_mcp.discover(self.upstream)  # Gym's MCPResourcesServer: tools on its /mcp
        if native:
            self.mcp_native = frozenset(t.name for t in native)
            openapi = tools_mod.ToolSet({**openapi.tools, **{t.name: t for t in native}})
            log.info("upstream serves tools on its own MCP endpoint: %s", ", ".join(sorted(self.mcp_native)))
        self.toolsets = ToolSets(openapi, catch_all, list(self.settings.tools_from))
        bad = tools_mod.unsafe_names(openapi.names, self.upstream.server_name)
        if bad:
            log.warning(
                "tool names some clients cannot accept (outside [A-Za-z0-9_-] or over 64 characters as "
                "mcp__%s__<tool>): %s",
                self.upstream.server_name,
                ", ".join(bad),
            )
        log.info(
            "tools from %s: %s%s",
            self.upstream.url,
            ", ".join(openapi.names) or "(none)",
            " (catch-all dispatcher: tools come from each row)" if catch_all else "",
        )

    def not_ready_reason(self) -> str | None:
        if not self.upstream.ready:
            return self.upstream.not_ready_reason or "upstream not ready"
        if self.toolsets is None or self.signer is None:
            return "tool list not loaded yet"
        return None

    # -- sessions -------------------------------------------------------------------------------

    def authorize(self, token: str | None, tool: str | None = None) -> Session:
        """The session a token names; Rejected (without touching the upstream) otherwise."""
        if not token:
            raise Rejected(
                f"missing session token: send the {HEADER} header from /seed_session", 401, "missing"
            )
        if self.signer is None:
            raise Rejected("bridge not ready", 503, "not_ready")
        try:
            claims = self.signer.verify(token)
        except ForeignIssuer as exc:
            raise self.foreign(exc) from exc
        except TokenError as exc:
            raise Rejected(str(exc), 401, "token") from exc
        try:
            session = self.sessions.get(claims.sid, self.upstream.generation)
        except SessionLost as exc:
            raise Rejected(str(exc), 409, "lost") from exc
        except SessionError as exc:
            raise Rejected(str(exc), 401, "session") from exc
        if tool is not None and not claims.allows(tool, session.tool_names):
            allowed = ", ".join(claims.tools if claims.tools is not None else session.tool_names) or "none"
            raise Rejected(
                f"tool {tool!r} is not in this session's allow-list ({allowed})", 403, "allow_list"
            )
        return session

    def foreign(self, exc: ForeignIssuer) -> Rejected:
        """Another replica's verified token: ``Foreign`` (forward it) when its issuer is a peer, else
        the refusal naming the issuer (nobody is contacted)."""
        owner = exc.claims.issuer
        peers = self.forwarding.peers
        if peers.allows(owner):
            return Foreign(str(exc), owner)
        return Rejected(
            f"session token was issued by another replica ({owner}), which is outside this "
            f"deployment's peers ({peers}): not forwarded; send this session's requests there, or "
            "add it to peers (--peers / GYM_MCP_BRIDGE_PEERS)",
            401,
            "peer",
        )

    def mcp_metadata(self, session: Session) -> dict[str, Any]:
        return {
            "server_name": self.upstream.server_name,
            "url_path": "/mcp",
            "url": f"{self.advertise_url}/mcp",
            "transport": "http",
            "headers": {HEADER: session.token},
            "tool_names": list(session.tool_names),
        }

    async def seed(
        self, body: bytes, row: dict[str, Any], cookie_header: str
    ) -> tuple[UpstreamResponse, Session | None]:
        """Forward a seed; on success create the session. Returns the upstream response and session.

        A row that declares a tool named against the MCP rule is refused before anything is
        forwarded: its name would otherwise become a request line to the upstream."""
        if self.toolsets is None or self.signer is None:
            raise Rejected(self.not_ready_reason() or "not ready", 503, "not_ready", retry_after=1)
        try:
            row_tools = tools_mod.from_row(row)
        except InvalidToolName as exc:
            raise Rejected(f"row refused: {exc}", 400, "row_tools") from exc
        self.sessions.sweep()
        if len(self.sessions) >= self.settings.max_sessions:
            raise Rejected(
                f"session cap reached ({self.settings.max_sessions} open sessions); retry later or raise max_sessions",
                503,
                "cap",
                retry_after=5,
            )
        generation = self.upstream.generation
        if "seed_session" in self.upstream_routes or self.toolsets.catch_all:
            response = await self.upstream.post("/seed_session", body, _json_headers(cookie_header))
        else:  # Gym's GymnasiumServer has no /seed_session: its first call (/reset) opens its session
            response = UpstreamResponse(200, [(b"content-type", b"application/json")], b"{}")
        if not response.is_success:
            return response, None
        cookie = merge_cookies(cookie_header, response.header_list("set-cookie"))
        try:
            session = self.sessions.create(body, cookie, self.toolsets.for_row(row_tools), generation)
        except SessionCapReached as exc:
            raise Rejected(str(exc), 503, "cap", retry_after=5) from exc
        session.token = self.signer.issue(session.sid, session.tool_names, self.settings.session_ttl_s)
        if self.mcp_native:  # keep the upstream's own MCP token: its tools act on the session it names
            with contextlib.suppress(ValueError):
                session.upstream_headers = upstream_mcp.session_headers(response.json())
        resources_id = row.get(TYPED_SEED_KEY)
        if isinstance(resources_id, str):
            self.by_resources_id.setdefault(resources_id, []).append(session.sid)
        self.metrics.sessions_created.inc()
        self.metrics.sessions_active.set(len(self.sessions))
        return response, session

    def close(self, session: Session) -> None:
        self.sessions.close(session.sid)
        self.metrics.sessions_active.set(len(self.sessions))

    def close_resources_id(self, resources_id: str) -> list[str]:
        """Revoke every session seeded with this typed ``resources_session_id``; their ids."""
        sids = self.by_resources_id.pop(resources_id, [])
        for sid in sids:
            self.sessions.close(sid)
        self.metrics.sessions_active.set(len(self.sessions))
        return sids

    # -- upstream calls -------------------------------------------------------------------------

    async def call_tool(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any],
        transport: str,
        emitted: str | None = None,
    ) -> ToolOutcome:
        """Call ``POST /<name>`` with the session's cookie and the arguments as sent (no schema check
        here: the model reads the upstream's own answer, its validation errors included, as over plain
        HTTP), capture cookie refreshes, log the call."""
        if name not in session.toolset.tools:
            allowed = ", ".join(session.tool_names) or "none"
            raise Rejected(f"unknown tool {name!r} for this session (tools: {allowed})", 404, "unknown_tool")
        if name in self.mcp_native:
            return await self._call_mcp_native(session, name, arguments, transport, emitted)
        body = orjson.dumps(arguments)
        started = time.time()
        clock = time.perf_counter()
        try:
            response = await self.upstream.post(f"/{name}", body, _json_headers(session.cookie))
            text = response.text
            content_type = response.content_type or "application/json"
            value, message, failed = None, text, not response.is_success
            # An upstream error answer (a Gym validation 422, a 500) reads exactly as over plain HTTP:
            # Gym's agents hand the model the body as it came; ``is_error`` carries the status.
            if not failed and "json" in content_type and response.content:
                try:
                    value = response.json()
                except ValueError:
                    failed = True
                    message = f"upstream answered HTTP {response.status_code} with invalid JSON: {text}"
            outcome = ToolOutcome(
                status=response.status_code,
                body=response.content,
                content_type=content_type,
                is_error=failed,
                set_cookies=response.header_list("set-cookie"),
                message=message,
                value=value,
            )
            if outcome.set_cookies:
                session.cookie = merge_cookies(session.cookie, outcome.set_cookies)
        except (UpstreamTimeout, UpstreamUnavailable, UpstreamRequestRefused) as exc:
            outcome = _failure_outcome(exc)
        self._finish(session, name, arguments, transport, emitted, outcome, started, clock)
        return outcome

    async def _call_mcp_native(
        self, session: Session, name: str, arguments: dict[str, Any], transport: str, emitted: str | None
    ) -> ToolOutcome:
        """A tool of an MCP-native upstream: ``tools/call`` on its own ``/mcp`` with the session's
        upstream token; the model reads the upstream's result as that endpoint gave it."""
        started = time.time()
        clock = time.perf_counter()
        try:
            response, text, is_error, structured = await upstream_mcp.call(
                self.upstream, session.upstream_headers, name, arguments, self.settings.tool_timeout_s
            )
            outcome = ToolOutcome(
                status=response.status_code,
                body=orjson.dumps(structured) if structured is not None else text.encode(),
                content_type="application/json" if structured is not None else "text/plain; charset=utf-8",
                is_error=is_error,
                set_cookies=[],
                message=text,
                value=structured,
            )
        except (UpstreamTimeout, UpstreamUnavailable, UpstreamRequestRefused) as exc:
            outcome = _failure_outcome(exc)
        self._finish(session, name, arguments, transport, emitted, outcome, started, clock)
        return outcome

    def _finish(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any],
        transport: str,
        emitted: str | None,
        outcome: ToolOutcome,
        started: float,
        clock: float,
    ) -> None:
        """Log the call in the session and count it."""
        elapsed = time.perf_counter() - clock
        self.sessions.record(
            session,
            ToolCallRecord(
                call_id=f"call_{secrets.token_hex(12)}",
                emitted_name=emitted or name,
                canonical_name=name,
                arguments=arguments,
                output=outcome.message,
                is_error=outcome.is_error,
                started_at=started,
                duration_s=elapsed,
            ),
        )
        label = (
            name if self.toolsets is not None and name in self.toolsets.openapi.tools else OTHER_TOOLS_LABEL
        )
        result = _outcome_label(outcome)
        self.metrics.tool_call(label, transport, result, elapsed)
        if tracing.ENABLED or self.audit is not None:
            digest = tracing.session_hash(session.sid)
            tracing.annotate(
                **{
                    "gym.tool": emitted or name,
                    "gym.tool.canonical": name,
                    "gym.outcome": result,
                    "gym.session": digest,
                }
            )
            if self.audit is not None:
                self.audit.record(digest, name, emitted or name, transport, result, elapsed, arguments)

    async def forward(
        self, path: str, body: bytes, cookie_header: str, timeout: float | None = None
    ) -> UpstreamResponse:
        return await self.upstream.post(path, body, _json_headers(cookie_header), timeout=timeout)

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
            self.metrics.sessions_active.set(len(self.sessions))
            self.metrics.upstream_up.set(1 if self.not_ready_reason() is None else 0)
            self.metrics.upstream_restarts.set(self.upstream.restarts)


def _json_headers(cookie_header: str) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if cookie_header:
        headers["cookie"] = cookie_header
    return headers


def _failure_outcome(exc: Exception) -> ToolOutcome:
    """A call the upstream did not answer (or that was not sent): its reason, as an error."""
    return ToolOutcome(
        status=_failure_status(exc),
        body=orjson.dumps({"detail": str(exc)}),
        content_type="application/json",
        is_error=True,
        set_cookies=[],
        message=str(exc),
    )


def _failure_status(exc: Exception) -> int:
    if isinstance(exc, UpstreamTimeout):
        return 504
    if isinstance(exc, UpstreamRequestRefused):
        return 400
    return 502


def _outcome_label(outcome: ToolOutcome) -> str:
    if not outcome.is_error:
        return "ok"
    if outcome.status == 504:
        return "timeout"
    if outcome.status == 502:
        return "unavailable"
    return "upstream_error"
