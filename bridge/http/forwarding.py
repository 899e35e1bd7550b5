"""Any replica serves any session: a request for another replica's session is relayed to its owner.

Owns the forwarding client: one raw keep-alive pool per owner replica (``PeerClient``, the
upstream's own client as ``bridge.upstream`` exports it: the request in one write, the answer parsed
with httptools), opened on the first forward to that owner, closed with the app. No cookie jar, no
default headers: nothing of one request is ever carried into another's. Which replicas may be
contacted is ``bridge.peers`` (the service's decision).

Data flow. A surface verifies the request's session token as it always does
(``Bridge.authorize``; on ``/mcp`` ``Bridge.verify_token``, once). Only when the token verifies
under the shared key but its signed ``iss`` is not this replica's advertise URL does
``TokenSigner.verify`` raise ``ForeignIssuer``; the owner-local hot path never reaches this module.
``bridge.admission`` then asks ``Peers.allows`` (``bridge.peers``): an issuer outside the peers is
refused there, naming it, without contacting anyone; one inside becomes ``Foreign(owner)``. The surface that catches it (REST routes, ``POST /mcp`` before the fast
path) hands the raw request -- method, path, headers, and the body it already read under its
limits -- to ``Forwarding.relay``, which writes it to ``owner`` unchanged but for the hop: the
hop-by-hop headers dropped, ``host`` the owner's, ``content-length`` the body's, the marker header
``MARKER`` added. The owner's answer is read whole and sent back as one ASGI start and one body
message: status, headers (every ``Set-Cookie`` included; hop-by-hop headers, ``date`` and ``server``
are the relaying server's own; ``content-length`` the body's), body. A long ``/mcp`` call with a
progress token keeps its client waiting all the same: this replica streams the progress itself
around the relay (``mcp_progress``), and the owner's own stream, read whole here, gives its last
message. The owner runs every check again (token, session, allow-list, limits, Host/Origin). A connection is reused only after an
exchange that ended exactly (``PeerClient``); a forwarded request is never retried.

A request that already carries the marker is never forwarded again: 508 naming both replicas. An
owner that cannot be reached, or that breaks off or garbles its answer, is a 502 naming it. The
owner's answer is awaited as long as the owner's own limit allows: none unless the operator set
``tool_timeout_s`` (``verify_timeout_s`` for ``/verify``), then that plus a margin (the owner's
own 504, naming the setting, comes first), past which it is a 504 naming it. On ``/mcp`` these
refusals are JSON-RPC errors, elsewhere ``{"detail": ...}``. Each owner's pool is bounded
(``peer_connections``, by default from the file limit: ``Settings.connection_bounds``): a request
past the bound waits for a connection as long as that takes (queued, ``stats`` counts it and its
wait), never fails for it and never counts the wait against a budget; connecting has its own
(``_CONNECT_S``). No upstream cookie is ever added here:
the forwarder does not hold the session. Every forwarded route is a POST (the relay never sends a
HEAD, whose answer has no body).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from bridge.http.responses import error_body, jsonrpc_error
from bridge.service import Bridge
from bridge.upstream import ConnectTimeout, PeerClient, PoolStats

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
        b"host",  # the owner's
        b"content-length",  # set again for the body sent
        _MARKER,
    }
)
NOT_RELAYED = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"upgrade",
        b"trailer",
        b"date",
        b"server",
        b"content-length",  # set again for the body relayed (the parser has de-chunked it)
    }
)
_MARGIN_S = 10.0  # beyond the owner's own budget: its 504 answers first
_CONNECT_S = 5.0
_MAX_OWNERS = 256
_EXPIRY_S = 30.0  # idle connections reused well inside a bridge's keep-alive window (75 s)


class Forwarding:
    """Forwards requests to the replica that owns their session; see the module docstring."""

    def __init__(
        self,
        advertise_url: str,
        tool_timeout_s: float | None,
        verify_timeout_s: float | None,
        registry: CollectorRegistry | None = None,
        max_connections: int = 128,
    ) -> None:
        self.advertise_url = advertise_url
        self.tool_timeout_s = tool_timeout_s
        self.verify_timeout_s = verify_timeout_s
        self.max_connections = max_connections  # per owner
        self._marker_line = b"\r\n" + _MARKER + b": " + advertise_url.encode("latin-1")
        self._pools: dict[str, PeerClient] = {}
        self.forwarded = Counter(
            "gym_mcp_bridge_forwarded",
            "Requests for another replica's session, by outcome (relayed, unreachable, timeout, loop)",
            ["outcome"],
            registry=registry,
        )
        self._relayed = self.forwarded.labels("relayed")
        self.rejections: Counter | None = None  # the bridge's, counting the refusals made here

    @classmethod
    def of(cls, bridge: Bridge) -> Forwarding:
        """The forwarder of a started ``bridge`` (its advertise URL, budgets and metrics registry)."""
        settings = bridge.settings
        forwarding = cls(
            bridge.advertise_url,
            settings.tool_timeout_s,
            settings.verify_timeout_s,
            bridge.metrics.registry,
            settings.connection_bounds()[1],
        )
        forwarding.rejections = bridge.metrics.rejections
        return forwarding

    def pool(self, owner: str) -> PeerClient:
        """The keep-alive pool to ``owner`` (a peer's base URL, already allowed by ``Peers``)."""
        pool = self._pools.get(owner)
        if pool is None:
            if len(self._pools) >= _MAX_OWNERS:  # replicas replaced over a long run: drop the oldest
                self._pools.pop(next(iter(self._pools))).close()
            pool = self._pools[owner] = PeerClient(owner, self.max_connections, _EXPIRY_S, _CONNECT_S)
        return pool

    def stats(self) -> PoolStats:
        """The connections to every owner replica now, summed: in use, idle, queued, the bounds."""
        return sum((pool.stats() for pool in self._pools.values()), PoolStats())

    async def aclose(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    def response(self, body: bytes, owner: str) -> Response:
        """A Starlette response whose sending relays the request to ``owner`` (REST routes)."""
        return _Relayed(self, body, owner)

    def request_bytes(self, scope: Scope, body: bytes, pool: PeerClient) -> bytes:
        """The request as written to the owner: request line, the caller's headers less the hop's,
        ``host``, the marker and ``content-length``, then the body -- one buffer, one write."""
        path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string", b"")
        parts = [scope["method"].encode("latin-1"), b" ", path]
        if query:
            parts += (b"?", query)
        parts += (b" HTTP/1.1\r\nhost: ", pool.host_header)
        for key, value in scope["headers"]:
            if key not in _NOT_FORWARDED:
                parts += (b"\r\n", key, b": ", value)
        parts += (self._marker_line, b"\r\ncontent-length: ", str(len(body)).encode(), b"\r\n\r\n", body)
        return b"".join(parts)

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
            await self._refuse(scope, body, send, 508, reason, "forward_loop")
            return
        limit = self.verify_timeout_s if scope["path"] == "/verify" else self.tool_timeout_s
        budget = None if limit is None else limit + _MARGIN_S  # the owner's time only, never the queue's
        try:
            pool = self.pool(owner)
            status, answer_headers, answer = await pool.send(self.request_bytes(scope, body, pool), budget)
        except ConnectTimeout as exc:
            await self._unreachable(scope, body, send, owner, exc)
            return
        except TimeoutError:
            self.forwarded.labels("timeout").inc()
            setting = "verify_timeout_s" if scope["path"] == "/verify" else "tool_timeout_s"
            within = f"{budget:g}s ({setting} + {_MARGIN_S:g}s)" if budget is not None else "in time"
            reason = f"owner replica {owner} did not answer within {within} (session forwarded there)"
            await self._refuse(scope, body, send, 504, reason, "owner_timeout")
            return
        except (OSError, ValueError) as exc:  # refused, reset, closed or garbled mid-answer; a bad URL
            await self._unreachable(scope, body, send, owner, exc)
            return
        relayed = [(key, value) for key, value in answer_headers if key not in NOT_RELAYED]
        relayed.append((b"content-length", str(len(answer)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": relayed})
        await send({"type": "http.response.body", "body": answer, "more_body": False})
        self._relayed.inc()

    async def _unreachable(self, scope: Scope, body: bytes, send: Send, owner: str, exc: Exception) -> None:
        self.forwarded.labels("unreachable").inc()
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = f"owner replica {owner} of this session is unreachable: {type(exc).__name__}: {detail}"
        log.warning("%s", reason)
        await self._refuse(scope, body, send, 502, reason, "owner_unreachable")

    async def _refuse(
        self, scope: Scope, body: bytes, send: Send, status: int, reason: str, kind: str
    ) -> None:
        if self.rejections is not None:
            self.rejections.labels(kind).inc()
        await _refuse(scope, body, send, status, reason, kind)


class _Relayed(Response):
    """The owner's answer, as a Starlette response (what a REST route returns)."""

    def __init__(self, forwarding: Forwarding, request_body: bytes, owner: str) -> None:
        super().__init__()
        self.forwarding = forwarding
        self.request_body = request_body
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.forwarding.relay(scope, self.request_body, self.owner, send)


async def _refuse(scope: Scope, body: bytes, send: Send, status: int, reason: str, kind: str) -> None:
    """A one-line refusal: a JSON-RPC error (with the request's id) on ``/mcp``, else ``{"detail"}``,
    each naming its failure (``kind``) in Gym's words."""
    if scope["path"] == "/mcp":
        encoded = jsonrpc_error(status, reason, _request_id(body), kind=kind)
    else:
        encoded = error_body(status, reason, kind)
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
