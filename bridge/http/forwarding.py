"""Any replica serves any session: a request for another replica's session is relayed to its owner.

Owns the forwarding client (one pooled ``httpx`` transport, opened on the first forward, closed
with the app; a transport, not a client, so no cookie jar ever carries one session's cookies into
another's request). Which replicas may be contacted is ``bridge.peers`` (the service's decision).

Data flow. A surface verifies the request's session token as it always does
(``Bridge.authorize``). Only when the token verifies under the shared key but its signed ``iss`` is
not this replica's advertise URL does ``TokenSigner.verify`` raise ``ForeignIssuer``; the owner-local
hot path never reaches this module. ``Bridge.authorize`` then asks ``Peers.allows`` (``bridge.peers``): an issuer
outside the peers is refused there, naming it, without contacting anyone; one inside becomes
``service.Foreign(owner)``. The surface that catches it (REST routes, the MCP fast path, the MCP SDK
path's pre-check) hands the raw request -- method, path, headers, and the body it already read
under its limits -- to ``Forwarding.relay``, which sends it to ``owner`` with the marker header
``MARKER`` and streams the owner's answer back unchanged: status, headers (every ``Set-Cookie``
included; hop-by-hop headers, ``date`` and ``server`` are the relaying server's own), body chunk by
chunk. The owner runs every check again (token, session, allow-list, limits, Host/Origin).

A request that already carries the marker is never forwarded again: 508 naming both replicas. An
owner that cannot be reached is a 502 naming it; one that does not answer within the surface's
budget (``tool_timeout_s``, ``verify_timeout_s`` for ``/verify``, plus a margin so the owner's
own 504 comes first) a 504 naming it. On ``/mcp`` these refusals are JSON-RPC errors, elsewhere
``{"detail": ...}``. No upstream cookie is ever added here: the forwarder does not hold the session.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson
from prometheus_client import CollectorRegistry, Counter
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from bridge.service import Bridge

log = logging.getLogger("gym_mcp_bridge.forwarding")

MARKER = "x-gym-mcp-bridge-forwarded-by"  # value: the advertise URL of the replica that forwarded
_MARKER = MARKER.encode("latin-1")
_NOT_FORWARDED = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"expect",
        b"host",  # the owner's, set by the client from the URL
        b"content-length",  # set again for the body sent
        _MARKER,
    }
)
_NOT_RELAYED = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"trailer", b"date", b"server"}
)
_MARGIN_S = 10.0  # beyond the owner's own budget: its 504 answers first
_CONNECT_S = 5.0


class Forwarding:
    """Forwards requests to the replica that owns their session; see the module docstring."""

    def __init__(
        self,
        advertise_url: str,
        tool_timeout_s: float,
        verify_timeout_s: float,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.advertise_url = advertise_url
        self.tool_timeout_s = tool_timeout_s
        self.verify_timeout_s = verify_timeout_s
        self._transport: httpx.AsyncHTTPTransport | None = None
        self.forwarded = Counter(
            "gym_mcp_bridge_forwarded",
            "Requests for another replica's session, by outcome (relayed, unreachable, timeout, loop)",
            ["outcome"],
            registry=registry,
        )

    @classmethod
    def of(cls, bridge: Bridge) -> Forwarding:
        """The forwarder of a started ``bridge`` (its advertise URL, budgets and metrics registry)."""
        settings = bridge.settings
        return cls(
            bridge.advertise_url, settings.tool_timeout_s, settings.verify_timeout_s, bridge.metrics.registry
        )

    def transport(self) -> httpx.AsyncHTTPTransport:
        """The pooled keep-alive transport: no proxy from the environment, no retry, no redirect,
        no cookie jar, no default headers (the owner gets the caller's headers, and the marker)."""
        if self._transport is None:
            limits = httpx.Limits(max_connections=1024, max_keepalive_connections=128)
            self._transport = httpx.AsyncHTTPTransport(limits=limits, retries=0)
        return self._transport

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None

    def response(self, body: bytes, owner: str) -> Response:
        """A Starlette response whose sending relays the request to ``owner`` (REST routes)."""
        return _Relayed(self, body, owner)

    async def relay(self, scope: Scope, body: bytes, owner: str, send: Send) -> None:
        """Send the request (``scope`` + ``body``) to ``owner``; send its answer back unchanged."""
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        came_from = next((value for key, value in headers if key == _MARKER), None)
        if came_from is not None:
            self.forwarded.labels("loop").inc()
            reason = (
                f"session of {owner} reached {self.advertise_url}, already forwarded by "
                f"{came_from.decode('latin-1')}: not forwarded again (is {owner} the advertise URL of a "
                "running replica?)"
            )
            await _refuse(scope, body, send, 508, reason)
            return
        path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string", b"")
        url = owner + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        sent = [(key, value) for key, value in headers if key not in _NOT_FORWARDED]
        sent.append((_MARKER, self.advertise_url.encode("latin-1")))
        budget = (self.verify_timeout_s if scope["path"] == "/verify" else self.tool_timeout_s) + _MARGIN_S
        timeout = httpx.Timeout(budget, connect=min(budget, _CONNECT_S))
        try:
            request = httpx.Request(
                scope["method"], url, headers=sent, content=body, extensions={"timeout": timeout.as_dict()}
            )
            response = await self.transport().handle_async_request(request)
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
                await self._unreachable(scope, body, send, owner, exc)
            else:
                self.forwarded.labels("timeout").inc()
                reason = f"owner replica {owner} did not answer within {budget:g}s (session forwarded there)"
                await _refuse(scope, body, send, 504, reason)
            return
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            await self._unreachable(scope, body, send, owner, exc)
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (key.lower(), value)
                        for key, value in response.headers.raw
                        if key.lower() not in _NOT_RELAYED
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            self.forwarded.labels("relayed").inc()
        except httpx.HTTPError as exc:  # the owner went away mid-answer: the connection is cut
            self.forwarded.labels("unreachable").inc()
            raise ConnectionAbortedError(f"owner replica {owner} broke off its answer: {exc!r}") from exc
        finally:
            await response.aclose()

    async def _unreachable(self, scope: Scope, body: bytes, send: Send, owner: str, exc: Exception) -> None:
        self.forwarded.labels("unreachable").inc()
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = f"owner replica {owner} of this session is unreachable: {type(exc).__name__}: {detail}"
        log.warning("%s", reason)
        await _refuse(scope, body, send, 502, reason)


class _Relayed(Response):
    """The owner's answer, as a Starlette response (what a REST route returns)."""

    def __init__(self, forwarding: Forwarding, request_body: bytes, owner: str) -> None:
        super().__init__()
        self.forwarding = forwarding
        self.request_body = request_body
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.forwarding.relay(scope, self.request_body, self.owner, send)


async def _refuse(scope: Scope, body: bytes, send: Send, status: int, reason: str) -> None:
    """A one-line refusal: a JSON-RPC error (with the request's id) on ``/mcp``, else ``{"detail"}``."""
    payload: Any
    if scope["path"] == "/mcp":
        payload = {
            "jsonrpc": "2.0",
            "id": _request_id(body),
            "error": {"code": -32603, "message": reason},
        }
    else:
        payload = {"detail": reason}
    encoded = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(encoded)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": encoded, "more_body": False})


def _request_id(body: bytes) -> Any:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, int | str) else None
