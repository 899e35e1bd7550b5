"""The ``/mcp`` fast path answers a ``tools/call`` exactly as the MCP SDK's transport does.

One bridge (in process, external mode on a real Gym counter server) and one ``McpEndpoint``; each
request is sent twice, once through ``endpoint.app`` (the fast path's triage) and once straight to
``endpoint.sdk_app`` (the SDK), on two sessions seeded alike, and the HTTP status, content type and
JSON body must match -- for both protocol eras (no version header, each handshake revision, and
2026-07-28 with its envelope and routing headers), for successes and for every refusal. Requests the
fast path must not answer itself (other methods, notifications, a mismatched routing header,
``_meta`` on the handshake wire, a wrong Accept) must reach the SDK, and batches and ids neither string
nor integer are refused before it (``http/jsonrpc.py``): ``endpoint.fast_calls`` says which path
answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import orjson
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from bridge.http.mcp import McpEndpoint, Reply
from bridge.service import Bridge
from bridge.settings import Settings
from tests.fixtures.bridges import HEADER, SECRET, UpstreamProcess, counter_row

pytestmark = pytest.mark.anyio
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}


class Harness:
    def __init__(self, bridge: Bridge, endpoint: McpEndpoint) -> None:
        self.bridge = bridge
        self.endpoint = endpoint
        self.fast = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=endpoint.app), base_url="http://127.0.0.1"
        )
        self.sdk = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=endpoint.sdk_app), base_url="http://127.0.0.1"
        )

    async def token(self, initial: int = 5) -> str:
        body = orjson.dumps(counter_row(initial))
        response, session = await self.bridge.seed(body, orjson.loads(body), "")
        assert response.status_code == 200 and session is not None
        return session.token

    async def both(
        self,
        message: Any,
        headers: dict[str, str],
        fast_token: str | None = None,
        sdk_token: str | None = None,
    ) -> tuple[httpx.Response, httpx.Response, bool]:
        """Send ``message`` through both paths; returns the two responses and whether the fast path answered."""
        base = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            **headers,
        }
        before = self.endpoint.fast_calls
        body = json.dumps(message, separators=(",", ":")).encode()  # integers past 64 bits too
        fast = await self.fast.post("/mcp", content=body, headers=_with(base, fast_token))
        took_fast = self.endpoint.fast_calls > before
        sdk = await self.sdk.post("/mcp", content=body, headers=_with(base, sdk_token))
        return fast, sdk, took_fast


def _with(headers: dict[str, str], token: str | None) -> dict[str, str]:
    return {**headers, HEADER: token} if token is not None else headers


def same(fast: httpx.Response, sdk: httpx.Response) -> None:
    assert fast.status_code == sdk.status_code, (fast.text, sdk.text)
    assert fast.headers.get("content-type") == sdk.headers.get("content-type")
    assert fast.content == sdk.content, (fast.text, sdk.text)  # byte for byte


@pytest.fixture
async def harness(counter_upstream: UpstreamProcess) -> AsyncIterator[Harness]:
    bridge = Bridge(Settings(upstream_url=counter_upstream.url, secret=SECRET))
    await bridge.start()
    endpoint = McpEndpoint(bridge)
    endpoint.server.name = bridge.upstream.server_name
    assert endpoint.fast is not None, (
        "the fast path is off: the MCP SDK differs from the one it was built for"
    )
    async with endpoint.manager.run():
        h = Harness(bridge, endpoint)
        async with h.fast, h.sdk:
            yield h
    await bridge.upstream.stop()


def call(
    name: str, arguments: Any = None, request_id: Any = 1, meta: Any = None, **extra: Any
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, **extra}
    if arguments is not None:
        params["arguments"] = arguments
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def era_headers(version: str | None, name: str = "increment_counter") -> dict[str, str]:
    if version is None:
        return {}
    if version == MODERN:
        return {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}
    return {"mcp-protocol-version": version}


ERAS = [None, *HANDSHAKE_PROTOCOL_VERSIONS, MODERN]


async def test_calls_answer_alike_on_both_paths(harness: Harness) -> None:
    for version in ERAS:  # one upstream for every era: each boot of a Gym server costs seconds
        await _calls_alike(harness, version)


async def _calls_alike(harness: Harness, version: str | None) -> None:
    meta = META if version == MODERN else None
    fast_token, sdk_token = await harness.token(5), await harness.token(5)
    cases: list[tuple[str, Any, Any]] = [
        ("increment_counter", {"count": 1}, 1),
        ("increment_counter", {"count": 2}, "string-id"),
        ("get_counter_value", {}, 3),
        ("get_counter_value", None, 4),  # no arguments at all
        ("increment_counter", {"count": "x"}, 5),  # argument validation error text
        ("increment_counter", {}, 6),  # missing required argument
        ("no_such_tool", {}, 7),  # not in the allow-list
        ("get_counter_value", {}, 8),
    ]
    for name, arguments, request_id in cases:
        message = call(name, arguments, request_id, meta)
        fast, sdk, took_fast = await harness.both(message, era_headers(version, name), fast_token, sdk_token)
        same(fast, sdk)
        assert took_fast, f"{name} was not answered by the fast path"
    final = call("get_counter_value", {}, 9, meta)
    fast, sdk, took_fast = await harness.both(
        final, era_headers(version, "get_counter_value"), fast_token, sdk_token
    )
    assert took_fast and fast.json()["result"]["structuredContent"] == {"count": 8}
    same(fast, sdk)
    # An integer past 64 bits reaches Gym exact on both paths (orjson alone would send a float,
    # which Gym's int field refuses), and comes back exact in the text and structuredContent.
    wide = 2**64 + 1
    for request_id, (name, arguments) in enumerate(
        [("increment_counter", {"count": wide}), ("get_counter_value", {})], start=10
    ):
        fast, sdk, took_fast = await harness.both(
            call(name, arguments, request_id, meta), era_headers(version, name), fast_token, sdk_token
        )
        same(fast, sdk)
        assert took_fast and fast.json()["result"]["isError"] is False, fast.text
    counted = json.loads(fast.json()["result"]["content"][0]["text"])["count"]
    assert type(counted) is int and counted == 8 + wide


async def test_refusals_answer_alike_on_both_paths(harness: Harness) -> None:
    for version in (None, "2025-06-18", MODERN):
        await _refusals_alike(harness, version)


async def _refusals_alike(harness: Harness, version: str | None) -> None:
    meta = META if version == MODERN else None
    token = await harness.token(1)
    closed = await harness.token(1)
    harness.bridge.close(harness.bridge.sessions.get(harness.bridge.signer.verify(closed).sid, 0))  # type: ignore[union-attr]
    headers = era_headers(version)
    message = call("increment_counter", {"count": 1}, 1, meta)
    for fast_token, sdk_token in [
        (None, None),  # missing token
        ("not-a-jwt", "not-a-jwt"),  # malformed
        (token + "x", token + "x"),  # bad signature
        (closed, closed),  # revoked
    ]:
        fast, sdk, took_fast = await harness.both(message, headers, fast_token, sdk_token)
        same(fast, sdk)
        assert took_fast
        assert fast.json()["result"]["isError"] is True
        assert fast.json()["result"]["_meta"]["failure_kind"] in (
            "gym_mcp_bridge:token_missing",
            "gym_mcp_bridge:token_invalid",
            "session_lost",
        )
    # a Bearer token is accepted on /mcp as well
    bearer = {**headers, "authorization": f"Bearer {token}"}
    fast, sdk, took_fast = await harness.both(
        call("get_counter_value", {}, 2, meta), {**bearer, **era_headers(version, "get_counter_value")}
    )
    same(fast, sdk)
    assert took_fast and fast.json()["result"]["structuredContent"] == {"count": 1}


async def test_everything_else_goes_to_the_sdk(harness: Harness) -> None:
    token = await harness.token(1)
    modern = era_headers(MODERN)
    sdk_cases: list[tuple[Any, dict[str, str]]] = [
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, {}),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),
        (call("get_counter_value", {}, 1, {"progressToken": 3}), {}),  # _meta on the handshake wire
        (call("get_counter_value", {}, 1, META), {}),  # a modern envelope on the handshake wire
        (call("get_counter_value", [1], 1), {}),  # arguments not an object
        (call("get_counter_value", {}, 1, META), {"mcp-protocol-version": MODERN}),  # routing headers missing
        (call("get_counter_value", {}, 1, META), {**modern, "mcp-name": "other"}),  # mismatched Mcp-Name
        (
            call(
                "get_counter_value", {}, 1, {**META, "io.modelcontextprotocol/protocolVersion": "2025-06-18"}
            ),
            modern,
        ),
        (
            call("increment_counter", {"count": 1}, 1, {"io.modelcontextprotocol/protocolVersion": MODERN}),
            modern,
        ),
        (call("get_counter_value", {}, 1), {"mcp-protocol-version": "2099-01-01"}),  # unknown revision
        ({**call("get_counter_value", {}, 1), "extra": 1}, {}),  # unexpected envelope member
    ]
    for message, headers in sdk_cases:
        fast, sdk, took_fast = await harness.both(message, headers, token, token)
        assert not took_fast, message
        assert fast.status_code == sdk.status_code and fast.text == sdk.text, (message, fast.text, sdk.text)
    # no message MCP takes: refused before the SDK (tests/test_jsonrpc_validation.py has the rest)
    for message in (
        [call("get_counter_value", {}, 1)],
        *(call("get_counter_value", {}, i) for i in (None, True, 1.5)),
    ):
        fast, sdk, took_fast = await harness.both(message, {}, token, token)
        assert not took_fast and fast.status_code == 400, (message, fast.text)
        assert fast.json()["error"]["code"] == -32600 and fast.json()["id"] is None
    # transport-level refusals: the SDK answers a wrong Accept on both paths
    fast, sdk, took_fast = await harness.both(
        call("get_counter_value", {}, 1), {"accept": "text/event-stream"}, token, token
    )
    assert not took_fast and fast.status_code == sdk.status_code == 406
    fast = await harness.fast.post(
        "/mcp",
        content=b"{not json",
        headers={"content-type": "application/json", "accept": "application/json"},
    )
    sdk = await harness.sdk.post(
        "/mcp",
        content=b"{not json",
        headers={"content-type": "application/json", "accept": "application/json"},
    )
    assert fast.status_code == sdk.status_code == 400 and fast.json() == sdk.json()
    # GET and DELETE are the SDK's
    for method in ("GET", "DELETE"):
        fast = await harness.fast.request(method, "/mcp", headers={"accept": "application/json"})
        sdk = await harness.sdk.request(method, "/mcp", headers={"accept": "application/json"})
        assert fast.status_code == sdk.status_code, method


# -- result encoding ---------------------------------------------------------------------------------

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


class Encoding:
    """One endpoint whose handler answers a set ``Reply`` (no upstream), its two apps served on one
    event loop (a portal thread) that outlives the hypothesis examples, so the fast path builds its
    result templates once and reuses them with every text and object the examples bring."""

    def __init__(self, portal: BlockingPortal, endpoint: McpEndpoint, stack: ExitStack) -> None:
        self.portal = portal
        self.endpoint = endpoint
        self.reply = Reply("", False)

        async def answer(token: str | None, name: str, arguments: Any, retry: Any) -> Reply:
            return self.reply

        endpoint._call = answer  # type: ignore[method-assign]  # the handler of both paths
        self.fast = stack.enter_context(portal.wrap_async_context_manager(_asgi_client(endpoint.app)))
        self.sdk = stack.enter_context(portal.wrap_async_context_manager(_asgi_client(endpoint.sdk_app)))

    def both(
        self, reply: Reply, message: Any, headers: dict[str, str]
    ) -> tuple[httpx.Response, httpx.Response, bool]:
        """``message`` through the fast path and through the SDK; whether the fast path answered it."""
        self.reply = reply
        body = orjson.dumps(message)
        sent = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            **headers,
        }
        before = self.endpoint.fast_calls
        fast = self.portal.call(lambda: self.fast.post("/mcp", content=body, headers=sent))
        took_fast = self.endpoint.fast_calls == before + 1
        sdk = self.portal.call(lambda: self.sdk.post("/mcp", content=body, headers=sent))
        assert self.endpoint.fast_calls == before + int(took_fast), "sdk_app went through the fast path"
        return fast, sdk, took_fast


def _asgi_client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


@pytest.fixture(scope="module")
def encoding() -> Iterator[Encoding]:
    bridge = Bridge(Settings(upstream_url="http://127.0.0.1:9", secret=SECRET))  # never called
    endpoint = McpEndpoint(bridge)
    assert endpoint.fast is not None
    with ExitStack() as stack:
        portal = stack.enter_context(start_blocking_portal())
        stack.enter_context(portal.wrap_async_context_manager(endpoint.manager.run()))
        yield Encoding(portal, endpoint, stack)
    asyncio.run(bridge.upstream.stop())  # its client and scratch directory


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(ERAS),
    text=st.text(),
    is_error=st.booleans(),
    structured=st.none() | st.dictionaries(st.text(max_size=8), _JSON_VALUES, max_size=5),
    request_id=st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=12),
)
def test_result_encoding_matches_the_sdk(
    encoding: Encoding,
    version: str | None,
    text: str,
    is_error: bool,
    structured: dict[str, Any] | None,
    request_id: int | str,
) -> None:
    """For any text and any JSON object an upstream can answer (unicode, control characters, big
    integers, floats of every magnitude, nesting) in every revision, the fast path (which answered:
    ``fast_calls``) sends the bytes the SDK's own stateless app sends for the same handler reply."""
    message = call("get_counter_value", {}, request_id, META if version == MODERN else None)
    reply = Reply(text, is_error, structured)
    fast, sdk, took_fast = encoding.both(reply, message, era_headers(version, "get_counter_value"))
    assert took_fast, "the fast path did not answer the call"
    same(fast, sdk)
    result = fast.json()["result"]
    assert result["content"] == [{"type": "text", "text": text}] and result["isError"] is is_error
    assert result.get("structuredContent") == structured
