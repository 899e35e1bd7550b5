"""The client side of each path: seed a rollout session, call a tool, read the counter back.

Raw clients share one aiohttp session (keep-alive pool, no cookie jar: every request carries exactly
its session's cookie or token) and post bytes built with orjson, so the client costs the same on
every path. The MCP raw client posts a single stateless ``tools/call`` JSON-RPC request, with the
session token header, in either protocol era. The SDK client is the official MCP Python SDK
(``mcp.Client`` over streamable HTTP), one client per rollout session, kept open for its calls.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from benchmarks.procs import BenchError

TOKEN_HEADER = "X-NeMo-Gym-Session-Token"
MODERN = "2026-07-28"
_JSON = {"content-type": "application/json"}
_MCP_ACCEPT = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "gym-mcp-bridge-bench", "version": "0"},
}


def seed_body(initial: int) -> bytes:
    return orjson.dumps({"responses_create_params": {"input": []}, "initial_count": initial})


@dataclass
class Session:
    initial: int
    headers: dict[str, str] = field(default_factory=dict)
    client: Any = None  # SDK client
    stack: contextlib.AsyncExitStack | None = None


class PathClient:
    """One way of reaching the counter tools. Subclasses fill in seed/call/counter."""

    name = ""
    isolated = True  # False: every caller shares one upstream session (the generic proxy)

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http

    async def seed(self, initial: int) -> Session:
        raise NotImplementedError

    async def call(self, session: Session, tool: str, arguments: dict[str, Any]) -> Any:
        raise NotImplementedError

    async def counter(self, session: Session) -> int:
        value = await self.call(session, "get_counter_value", {})
        if not isinstance(value, dict) or not isinstance(value.get("count"), int):
            raise BenchError(f"{self.name}: unexpected get_counter_value result {value!r}")
        return int(value["count"])

    async def close(self, session: Session) -> None:
        return None

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, Any]:
        async with self.http.post(url, data=body, headers=headers) as response:
            return response.status, await response.read(), response


class DirectClient(PathClient):
    """Gym's own REST contract straight to the upstream: the reference."""

    def __init__(self, http: aiohttp.ClientSession, url: str, name: str = "direct") -> None:
        super().__init__(http)
        self.url = url
        self.name = name

    async def seed(self, initial: int) -> Session:
        async with self.http.post(f"{self.url}/seed_session", data=seed_body(initial), headers=_JSON) as r:
            await r.read()
            if r.status != 200:
                raise BenchError(f"{self.name}: seed answered {r.status}")
            cookie = "; ".join(c.split(";", 1)[0] for c in r.headers.getall("set-cookie", []))
        return Session(initial=initial, headers={**_JSON, "cookie": cookie})

    async def call(self, session: Session, tool: str, arguments: dict[str, Any]) -> Any:
        status, body, _ = await self._post(f"{self.url}/{tool}", orjson.dumps(arguments), session.headers)
        if status != 200:
            raise BenchError(f"{self.name}: {tool} answered {status}: {body[:200]!r}")
        return orjson.loads(body)


def _decode_rpc(name: str, status: int, body: bytes, content_type: str) -> Any:
    if content_type.startswith("text/event-stream"):
        data = [line[5:].strip() for line in body.splitlines() if line.startswith(b"data:")]
        body = data[-1] if data else b""
    if status != 200:
        raise BenchError(f"{name}: HTTP {status}: {body[:300]!r}")
    message = orjson.loads(body)
    if "error" in message:
        raise BenchError(f"{name}: JSON-RPC error {message['error']}")
    result = message["result"]
    if result.get("isError"):
        raise BenchError(f"{name}: tool error {result.get('content')}")
    structured = result.get("structuredContent")
    return structured if structured is not None else orjson.loads(result["content"][0]["text"])


class McpRawClient(PathClient):
    """A stateless JSON-RPC ``tools/call`` POST per call, with the session token header.

    ``modern`` speaks 2026-07-28 (per-request ``_meta`` envelope, ``MCP-Protocol-Version``,
    ``Mcp-Method`` and ``Mcp-Name`` headers); otherwise the handshake-era wire without a version
    header, as a stateless client sends it."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        base: str,
        name: str,
        modern: bool = False,
        seed_url: str | None = None,
    ) -> None:
        super().__init__(http)
        self.mcp_url = f"{base}/mcp"
        self.seed_url = f"{seed_url or base}/seed_session"
        self.name = name
        self.modern = modern
        self.ids = itertools.count(1)
        self.tool_names: dict[str, str] = {}

    async def seed(self, initial: int) -> Session:
        async with self.http.post(self.seed_url, data=seed_body(initial), headers=_JSON) as r:
            payload = orjson.loads(await r.read())
            if r.status != 200:
                raise BenchError(f"{self.name}: seed answered {r.status}: {payload}")
        return Session(initial=initial, headers={**_MCP_ACCEPT, **payload["mcp"]["headers"]})

    async def call(self, session: Session, tool: str, arguments: dict[str, Any]) -> Any:
        tool = self.tool_names.get(tool, tool)
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        headers = session.headers
        if self.modern:
            params["_meta"] = _META
            headers = {
                **headers,
                "mcp-protocol-version": MODERN,
                "mcp-method": "tools/call",
                "mcp-name": tool,
            }
        body = orjson.dumps(
            {"jsonrpc": "2.0", "id": next(self.ids), "method": "tools/call", "params": params}
        )
        status, raw, response = await self._post(self.mcp_url, body, headers)
        return _decode_rpc(self.name, status, raw, response.headers.get("content-type", ""))


class ProxyRawClient(McpRawClient):
    """The generic OpenAPI->MCP proxy: tool names are FastMCP's operation ids and there is no per-rollout
    session at all -- the proxy's one HTTP client carries one cookie jar for every caller. Correctness
    is then checked on the merged counter (the sum of every caller's increments)."""

    isolated = False

    async def discover(self) -> None:
        body = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}})
        status, raw, _ = await self._post(self.mcp_url, body, _MCP_ACCEPT)
        if status != 200:
            raise BenchError(f"{self.name}: tools/list answered {status}")
        for tool in orjson.loads(raw)["result"]["tools"]:
            for wanted in ("increment_counter", "get_counter_value"):
                if tool["name"].startswith(wanted):
                    self.tool_names[wanted] = tool["name"]

    async def seed(self, initial: int) -> Session:
        if not self.tool_names:
            await self.discover()
        return Session(initial=initial, headers=dict(_MCP_ACCEPT))


class McpSdkClient(PathClient):
    """The official MCP Python SDK client (``mcp.Client``, streamable HTTP, handshake era), one per session."""

    def __init__(
        self, http: aiohttp.ClientSession, base: str, name: str, seed_url: str | None = None
    ) -> None:
        super().__init__(http)
        self.mcp_url = f"{base}/mcp"
        self.seed_url = f"{seed_url or base}/seed_session"
        self.name = name

    async def seed(self, initial: int) -> Session:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with self.http.post(self.seed_url, data=seed_body(initial), headers=_JSON) as r:
            payload = orjson.loads(await r.read())
            if r.status != 200:
                raise BenchError(f"{self.name}: seed answered {r.status}: {payload}")
        stack = contextlib.AsyncExitStack()
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=payload["mcp"]["headers"], timeout=60)
        )
        client = await stack.enter_async_context(
            Client(streamable_http_client(self.mcp_url, http_client=http), mode="legacy")
        )
        return Session(initial=initial, client=client, stack=stack)

    async def call(self, session: Session, tool: str, arguments: dict[str, Any]) -> Any:
        result = await session.client.call_tool(tool, arguments)
        if result.is_error:
            raise BenchError(f"{self.name}: tool error {result.content}")
        if result.structured_content is not None:
            return result.structured_content
        return orjson.loads(result.content[0].text)

    async def close(self, session: Session) -> None:
        if session.stack is not None:
            await session.stack.aclose()
