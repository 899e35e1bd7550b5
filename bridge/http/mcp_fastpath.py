"""The ``/mcp`` fast path: a single well-formed ``tools/call`` POST answered without the MCP SDK's
per-request transport.

The SDK's stateless transport builds a transport, a task, memory streams and a JSON-RPC dispatcher
for every POST; for the one message a rollout sends thousands of times that machinery is most of the
bridge's CPU. ``McpEndpoint.post`` (``bridge.http.mcp``) hands this module a POST whose body was
read and limited and whose token was verified (a ``Verdict``); ``FastPath.answer`` checks the
headers the SDK looks at (``_headers``) and the message (``_plan``; a 2026-07-28 request also
``_modern_ok``), and either declines (False, nothing sent: the SDK serves the request) or answers:
the endpoint's own handler (``McpEndpoint._call``) makes the ``Reply``, ``mcp_results.Results``
serializes it the SDK's way for the negotiated revision, and the JSON-RPC answer goes out in one
body with the SDK's status and headers. Another replica's session is relayed by the endpoint's
``forwarding``.

The endpoint is reached through ``Endpoint`` (what the fast path uses of it), so imports point one
way: ``bridge.http.mcp`` imports this module, never the reverse.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from mcp.server.lowlevel import Server
from starlette.types import Scope, Send

from bridge import exactjson
from bridge.admission import Foreign, Rejected
from bridge.http.forwarding import Forwarding
from bridge.http.mcp_results import (
    Reply,
    Results,
    Serializer,
    accepts_json,
    error_answer,
    meta_valid,
    sdk_serializer,
)
from bridge.http.requests import text_headers
from bridge.tokens import Claims

log = logging.getLogger("gym_mcp_bridge.mcp")

RetryParts = tuple[str | None, str | None, Any, Any]  # Idempotency-Key, Mcp-Session-Id, id, idempotencyKey
Verdict = Claims | Rejected  # a request's token, verified once: its claims, or the refusal it gets


class Endpoint(Protocol):
    """What the fast path uses of ``McpEndpoint``: its MCP server (for the SDK's serializer), its
    relay to other replicas, its count of fast answers and its ``tools/call`` handler."""

    server: Server[Any]
    forwarding: Forwarding
    fast_calls: int

    async def _call(
        self, verdict: Verdict, name: str, arguments: Mapping[str, Any] | None, retry: RetryParts
    ) -> Reply: ...


_PARAM_KEYS = frozenset({"name", "arguments", "_meta"})
_MESSAGE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_MCP_PARAM = b"\nmcp-param-"
_JSON_HEADERS = [(b"content-type", b"application/json")]
_META_CACHE_SIZE = 256


def _latin1(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


class FastPath:
    """Answers a single well-formed ``tools/call`` POST without the SDK's per-request transport.

    Built only against the SDK release it was checked with: if the private piece it leans on
    (``mcp_results.sdk_serializer``) is missing, ``build`` returns None and the SDK serves all
    (``tests/test_architecture.py`` fails loudly when that happens)."""

    def __init__(self, endpoint: Endpoint, serialize: Serializer) -> None:
        from mcp_types import DEFAULT_NEGOTIATED_VERSION
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

        self.endpoint = endpoint
        self.results = Results(serialize)
        self.default_version = DEFAULT_NEGOTIATED_VERSION
        self.handshake_versions = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
        self.modern_versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        self.valid_meta: dict[bytes, bool] = {}
        self.json_media: dict[tuple[bytes, bytes], bool] = {}  # (Content-Type, Accept): both JSON?

    @classmethod
    def build(cls, endpoint: Endpoint) -> FastPath | None:
        try:
            serialize = sdk_serializer(endpoint.server)
        except (ImportError, AttributeError, TypeError) as exc:  # pragma: no cover - another SDK release
            log.warning(
                "MCP fast path disabled (this MCP SDK differs from the one it was built for: %s)", exc
            )
            return None
        return cls(endpoint, serialize)

    async def answer(
        self, scope: Scope, found: dict[bytes, bytes], body: bytes, send: Send, verdict: Verdict
    ) -> bool:
        """Answer the POST when it is a plain ``tools/call`` answerable exactly as the SDK would; False
        (nothing sent) otherwise. Another replica's session raises ``Foreign`` before anything is sent."""
        headers = self._headers(scope, found)
        plan = self._plan(headers, body) if headers is not None else None
        if plan is None or headers is None:
            return False
        version, request_id, name, arguments = plan
        try:
            await self._answer(send, headers, verdict, version, request_id, name, arguments)
        except Foreign as exc:  # another replica's session: its owner answers
            await self.endpoint.forwarding.relay(scope, body, exc.owner, send)
        return True

    def _headers(self, scope: Scope, headers: dict[bytes, bytes]) -> dict[bytes, bytes] | None:
        """The request headers (``headers``: ``scope``'s as a dict), or None when one the SDK looks at
        would make it answer differently."""
        raw: list[tuple[bytes, bytes]] = scope["headers"]
        if len(headers) != len(raw):
            return None  # a repeated header: the SDK's first-or-last reading and its duplicate checks rule
        media = (headers.get(b"content-type", b""), headers.get(b"accept", b""))
        json_both = self.json_media.get(media)
        if json_both is None:  # the same few pairs on every call of a harness: judged once each
            json_both = media[0].split(b";", 1)[0].strip() == b"application/json" and accepts_json(media[1])
            if len(self.json_media) >= _META_CACHE_SIZE:
                self.json_media.clear()
            self.json_media[media] = json_both
        if not json_both:
            return None
        if _MCP_PARAM in b"\n" + b"\n".join(headers):  # a name starting mcp-param- (names hold no \n)
            return None
        return headers

    def _plan(
        self, headers: dict[bytes, bytes], body: bytes
    ) -> tuple[str, int | str, str, dict[str, Any] | None] | None:
        """(revision, request id, tool name, arguments) of a call the fast path can answer, else None."""
        try:
            message = exactjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if (
            type(message) is not dict
            or message.get("method") != "tools/call"
            or message.get("jsonrpc") != "2.0"
            or not _MESSAGE_KEYS.issuperset(message)
        ):
            return None
        request_id = message.get("id")
        if type(request_id) is not int and type(request_id) is not str:
            return None  # missing (a notification), null, bool, float ...: the SDK's answer
        params = message.get("params")
        if type(params) is not dict or not _PARAM_KEYS.issuperset(params):
            return None
        name = params.get("name")
        arguments = params.get("arguments")
        if type(name) is not str or (arguments is not None and type(arguments) is not dict):
            return None
        header_version = headers.get(b"mcp-protocol-version")
        version = self.default_version if header_version is None else header_version.decode("latin-1")
        if version in self.handshake_versions:
            if "_meta" in params:
                return None  # request _meta (progress tokens, a stray modern envelope): the SDK's
            return version, request_id, name, arguments
        if version not in self.modern_versions:
            return None
        if not self._modern_ok(headers, message, version, params):
            return None
        return version, request_id, name, arguments

    def _modern_ok(
        self, headers: dict[bytes, bytes], message: dict[str, Any], version: str, params: dict[str, Any]
    ) -> bool:
        """A 2026-07-28 request passes the SDK's inbound ladder (routing headers agree with the body,
        the envelope names this revision) and its ``_meta`` validates for ``tools/call``."""
        from mcp.shared.inbound import InboundModernRoute, classify_inbound_request

        verdict = classify_inbound_request(message, headers=text_headers(headers.items()))
        if not isinstance(verdict, InboundModernRoute) or verdict.protocol_version != version:
            return False
        meta = params.get("_meta")
        try:
            key = orjson.dumps(meta, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            return False
        valid = self.valid_meta.get(key)
        if valid is None:
            valid = meta_valid(version, meta)
            if len(self.valid_meta) >= _META_CACHE_SIZE:
                self.valid_meta.clear()
            self.valid_meta[key] = valid
        return valid

    async def _answer(
        self,
        send: Send,
        headers: dict[bytes, bytes],
        verdict: Verdict,
        version: str,
        request_id: int | str,
        name: str,
        arguments: dict[str, Any] | None,
    ) -> None:
        endpoint = self.endpoint
        endpoint.fast_calls += 1
        modern = version in self.modern_versions
        status = 200
        try:
            retry = (
                _latin1(headers.get(b"idempotency-key")),
                _latin1(headers.get(b"mcp-session-id")),
                request_id,
                None,
            )
            reply = await endpoint._call(verdict, name, arguments, retry)
            payload = self.results.encode(version, modern, request_id, reply)
        except Foreign:
            raise
        except Exception as exc:
            payload, status = error_answer(request_id, exc, modern)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload, "more_body": False})
