"""Gym's resources-server HTTP contract, served transparently in front of the upstream.

``/seed_session`` forwards the row, creates the session and adds the MCP metadata (``mcp``, or
``resources_tools`` for Gym >= 0.7 typed seeds) with the signed token; the upstream's Set-Cookie
goes back to the caller beside the bridge's own session cookie. ``POST /<tool>`` forwards with the
session's cookie when the request names a session (token header or bridge cookie), else with the
caller's cookies. ``/verify`` is handed to ``verify``; ``/close_session`` revokes the session;
``/aggregate_metrics`` is forwarded. ``GET /example_row`` serves the managed environment's first
example row (for ``client-config`` with no row). Every refusal is a 4xx/5xx JSON ``{"detail": one line}``
with its failure in Gym's words (``failure_kind``, ``failure_reason``, ``terminal``: ``bridge.failures``).
A request naming another replica's session (a verified token whose issuer is a peer) is relayed to
that replica and answered with its response (``forwarding``).
"""

from __future__ import annotations

import functools
from http.cookies import SimpleCookie
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bridge import exactjson, outcomes, retries
from bridge import tools as tools_mod
from bridge.admission import Foreign, Rejected
from bridge.http import auth, skew
from bridge.http.forwarding import Forwarding
from bridge.http.prefixes import rollout_id
from bridge.http.requests import arguments_too_large, read_object
from bridge.http.responses import add_cookies, error, json_response, refusal
from bridge.scoring import verify as verify_mod
from bridge.service import TYPED_SEED_KEY, Bridge
from bridge.sessions import Session
from bridge.tokens import from_headers
from bridge.upstream import (
    UpstreamRequestRefused,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamUnavailable,
)

BRIDGE_COOKIE = "gym_mcp_bridge_session"  # the session token, for Gym clients that send only cookies
_COOKIES = 1024  # rendered session cookies kept


def strip_bridge_cookie(cookie_header: str | None) -> str:
    if not cookie_header:
        return ""
    jar = SimpleCookie()
    try:
        jar.load(cookie_header)
    except Exception:
        return cookie_header
    return "; ".join(f"{k}={m.coded_value}" for k, m in jar.items() if k != BRIDGE_COOKIE)


def session_of(
    bridge: Bridge, request: Request, tool: str | None = None, finished_ok: bool = False
) -> Session | None:
    """The session a REST request names (token header, else bridge cookie), or None."""
    token = from_headers(request.headers, bearer=False) or request.cookies.get(BRIDGE_COOKIE)
    if token is None:
        return None
    return bridge.authorize(token, tool, finished_ok)


class RestSurface:
    """Gym's own HTTP contract, bridged: ``/seed_session`` creates the session, ``/<tool>`` and
    ``/verify`` act on it (``Bridge``), everything else is the upstream's answer relayed."""

    def __init__(self, bridge: Bridge, forwarding: Forwarding | None = None) -> None:
        self.bridge = bridge
        self.forwarding = forwarding or Forwarding.of(bridge)
        self._remembered_cookie = functools.lru_cache(maxsize=_COOKIES)(self._session_cookie)

    def routes(self) -> list[Route]:
        return [
            Route("/seed_session", self.seed_session, methods=["POST"]),
            Route("/verify", self.verify, methods=["POST"]),
            Route("/close_session", self.close_session, methods=["POST"]),
            Route("/aggregate_metrics", self.aggregate_metrics, methods=["POST"]),
            Route("/example_row", self.example_row, methods=["GET"]),
            Route("/{tool:str}", self.tool, methods=["POST"]),
        ]

    async def _guard(self, request: Request) -> tuple[bytes, dict[str, Any]]:
        key = self.bridge.settings.api_key
        if key is not None and not auth.api_key_accepted(
            request.headers.get("authorization"), key.get_secret_value()
        ):
            raise Rejected(auth.REFUSAL, "api_key")
        reason = self.bridge.not_ready_reason()
        if reason is not None:
            raise Rejected(f"bridge not ready: {reason.splitlines()[0]}", "not_ready", retry_after=2)
        settings = self.bridge.settings
        return await read_object(request, settings.max_body_bytes, settings.max_json_depth)

    def _relay(self, response: UpstreamResponse) -> Response:
        """The upstream's answer as it came; a 422 for fields only a newer Gym sends says so too."""
        boot = self.bridge.upstream.boot
        return skew.annotate(response, boot.gym_version if boot is not None else None)

    async def _run(self, request: Request, handler: Any) -> Response:
        body = b""
        try:
            body, value = await self._guard(request)
            response: Response = await handler(request, body, value)
            return response
        except Foreign as exc:  # another replica's session (verified token): the owner answers
            return self.forwarding.response(body, exc.owner)
        except Rejected as exc:
            self.bridge.metrics.rejections.labels(exc.kind).inc()
            return refusal(exc)
        except (UpstreamRequestRefused, UpstreamTimeout, UpstreamUnavailable) as exc:
            kind = outcomes.failure_name(exc)
            self.bridge.metrics.rejections.labels(kind).inc()
            reason = str(exc).splitlines()[0] if isinstance(exc, UpstreamUnavailable) else str(exc)
            return error(outcomes.failure_status(exc), reason, kind=kind)

    async def seed_session(self, request: Request) -> Response:
        return await self._run(request, self._seed)

    async def _seed(self, request: Request, body: bytes, row: dict[str, Any]) -> Response:
        cookies = strip_bridge_cookie(request.headers.get("cookie"))
        response, session = await self.bridge.seed(body, row, cookies, rollout_id(request.scope))
        if session is None:
            return self._relay(response)
        try:
            payload = response.json() if response.content else {}
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {"result": payload}
        metadata = self.bridge.mcp_metadata(session)
        if TYPED_SEED_KEY in row or TYPED_SEED_KEY in payload:
            payload["resources_tools"] = metadata
        else:
            payload["mcp"] = metadata
        out = add_cookies(
            Response(
                exactjson.dumps(payload), status_code=response.status_code, media_type="application/json"
            ),
            response.header_list("set-cookie"),
        )
        return self._with_session_cookie(out, session)

    def _with_session_cookie(self, out: Response, session: Session, remember: bool = False) -> Response:
        """Set the bridge's session cookie on every answer of a session, as Gym re-sends its own:
        Gym's clients keep only the cookies of the last answer (simple_agent does), and without it
        their next call would reach the bridge with no session. Rendering it costs ≈ 11 µs, a
        twentieth of a REST call: a tool call's answer (``remember``) keeps it for the session's
        next calls, at most ``_COOKIES`` of them, so a seeded session that sits idle holds none."""
        render = self._remembered_cookie if remember else self._session_cookie
        out.raw_headers.append(render(session.token))
        return out

    def _session_cookie(self, token: str) -> tuple[bytes, bytes]:
        """The ``Set-Cookie`` header of a session's token, as Starlette's ``set_cookie`` renders it
        (the same bytes every time: the value and ``Max-Age`` never change for a token)."""
        rendered = Response()
        rendered.set_cookie(
            BRIDGE_COOKIE,
            token,
            max_age=int(self.bridge.settings.session_ttl_s),
            httponly=True,
            samesite="lax",
        )
        return rendered.raw_headers[-1]

    async def tool(self, request: Request) -> Response:
        return await self._run(request, self._tool)

    async def _tool(self, request: Request, body: bytes, arguments: dict[str, Any]) -> Response:
        name = request.path_params["tool"]  # percent-decoded by the server
        problem = tools_mod.name_problem(name)
        if problem is not None:  # never let it near the upstream's request line
            raise Rejected(f"no such tool route: {problem}", "tool_name")
        too_large = arguments_too_large(len(body), self.bridge.settings.max_argument_bytes)
        if too_large is not None:
            raise Rejected(too_large, "argument_size")
        toolsets = self.bridge.toolsets
        assert toolsets is not None
        session = session_of(self.bridge, request, name)
        if session is not None:
            try:
                retry = retries.key_of(request.headers.get("idempotency-key"))
            except ValueError as exc:
                raise Rejected(f"Idempotency-Key refused: {exc}", "json") from exc
            outcome = await self.bridge.call_tool(
                session, name, arguments, transport="http", rollout=rollout_id(request.scope), retry=retry
            )
            if outcome.failure is not None:  # the upstream did not answer: the bridge's own failure
                self.bridge.metrics.rejections.labels(outcome.failure.name).inc()
            out = Response(outcome.body, status_code=outcome.status, media_type=outcome.content_type)
            return self._with_session_cookie(add_cookies(out, outcome.set_cookies), session, remember=True)
        if name not in toolsets.openapi.tools and not toolsets.catch_all:
            raise Rejected(f"unknown route /{name}: the upstream has no such tool", "unknown_route")
        cookies = strip_bridge_cookie(request.headers.get("cookie"))
        return self._relay(
            await self.bridge.forward(f"/{name}", body, cookies, rollout=rollout_id(request.scope))
        )

    async def verify(self, request: Request) -> Response:
        return await self._run(request, self._verify)

    async def _verify(self, request: Request, body: bytes, value: dict[str, Any]) -> Response:
        session = session_of(self.bridge, request, finished_ok=True)
        cookies = strip_bridge_cookie(request.headers.get("cookie"))
        outcome = await self.bridge.verify(session, value, cookies, rollout_id(request.scope))
        if outcome.payload is None:
            out = self._relay(outcome.upstream)
        else:
            headers = {verify_mod.REPORT_HEADER: outcome.report_header or ""}
            out = json_response(outcome.payload, outcome.upstream.status_code, headers)
        return self._with_session_cookie(out, session) if session is not None else out

    async def close_session(self, request: Request) -> Response:
        return await self._run(request, self._close)

    async def _close(self, request: Request, body: bytes, value: dict[str, Any]) -> Response:
        """Revoke the named session's token whatever the upstream answers (a failed close must not
        leave a usable token behind), and every session of a typed ``resources_session_id``."""
        session = session_of(self.bridge, request, finished_ok=True)
        resources_id = value.get(TYPED_SEED_KEY)
        if session is None and not isinstance(resources_id, str):
            raise Rejected(
                "no session named: send the session token header, the bridge cookie, or a typed "
                f"body's {TYPED_SEED_KEY}",
                "session",
            )
        cookies = (
            session.cookie if session is not None else strip_bridge_cookie(request.headers.get("cookie"))
        )
        closed: list[str] = []
        if session is not None:
            self.bridge.close(session)
            closed.append(session.sid)
        if isinstance(resources_id, str):
            closed += [sid for sid in self.bridge.close_resources_id(resources_id) if sid not in closed]
        if "close_session" in self.bridge.upstream_routes:
            forwarded = await self.bridge.forward(
                "/close_session", body, cookies, rollout=rollout_id(request.scope)
            )
            out = self._relay(forwarded)
        else:
            out = JSONResponse({"closed": True, "sessions": closed})
        out.delete_cookie(BRIDGE_COOKIE)
        return out

    async def example_row(self, request: Request) -> Response:
        return await self._run(request, self._example_row)

    async def _example_row(self, request: Request, body: bytes, value: dict[str, Any]) -> Response:
        """The first row of the managed environment's own ``data/example.jsonl``: what
        ``client-config`` seeds with when it is given no row (a row the environment accepts)."""
        boot = self.bridge.upstream.boot
        if boot is None or boot.example_rows is None:
            raise Rejected(
                "this bridge knows no example rows of its environment (external mode, or the "
                "environment ships no data/example.jsonl): seed with a row of your own",
                "example_row",
            )
        try:
            with open(boot.example_rows, encoding="utf-8") as rows:
                first = next((line for line in rows if line.strip()), None)
            row = exactjson.loads(first) if first is not None else None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise Rejected(f"cannot read {boot.example_rows}: {exc}".splitlines()[0], "example_row") from exc
        if not isinstance(row, dict):
            raise Rejected(f"{boot.example_rows} has no JSON object row", "example_row")
        return JSONResponse(row)

    async def aggregate_metrics(self, request: Request) -> Response:
        return await self._run(request, self._aggregate)

    async def _aggregate(self, request: Request, body: bytes, value: dict[str, Any]) -> Response:
        cookies = strip_bridge_cookie(request.headers.get("cookie"))
        return self._relay(
            await self.bridge.forward(
                "/aggregate_metrics",
                body,
                cookies,
                timeout="verify_timeout_s",
                rollout=rollout_id(request.scope),
            )
        )
