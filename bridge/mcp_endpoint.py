"""``/mcp``: MCP over streamable HTTP, served by the MCP Python SDK's low-level server.

Stateless with JSON responses, so any replica request can be served on its own, and every protocol
revision the SDK knows is negotiated by the SDK (the initialize handshake era and 2026-07-28).
Each request carries its rollout's session token (``X-NeMo-Gym-Session-Token``, or
``Authorization: Bearer``). ``tools/list`` lists the token's session tools, or the upstream's
OpenAPI tools without a token. ``tools/call`` authorizes the token for that tool, then
``Bridge.call_tool`` calls the upstream with the session's cookie; every refusal and every
upstream failure comes back as an ``isError`` result whose text a model can read.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from bridge import __version__
from bridge.core import Bridge, Rejected
from bridge.tokens import from_headers

log = logging.getLogger("gym_mcp_bridge.mcp")

INVALID_SESSION = -32001  # JSON-RPC server-defined error: the session token was refused


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _token(ctx: ServerRequestContext[Any]) -> str | None:
    request = ctx.request
    headers = getattr(request, "headers", None)
    return from_headers(headers, bearer=True) if headers is not None else None


class McpEndpoint:
    def __init__(self, bridge: Bridge, security: TransportSecuritySettings | None = None) -> None:
        self.bridge = bridge
        self.server: Server[Any] = Server(
            "gym-mcp-bridge",
            version=__version__,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            get_tool_input_schema=lambda _name: None,
        )
        self.server.middleware = []  # no per-message OpenTelemetry span on the hot path
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            json_response=True,
            security_settings=security or TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=bridge.settings.max_body_bytes,
        )
        self.app = StreamableHTTPASGIApp(self.manager)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        token = _token(ctx)
        if token is None:
            toolsets = self.bridge.toolsets
            return types.ListToolsResult(tools=toolsets.openapi.mcp_tools() if toolsets else [])
        try:
            session = self.bridge.authorize(token)
        except Rejected as exc:
            self.bridge.metrics.rejections.labels(exc.kind).inc()
            raise MCPError(INVALID_SESSION, exc.reason) from exc
        return types.ListToolsResult(tools=session.toolset.mcp_tools())

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        try:
            session = self.bridge.authorize(_token(ctx), name)
            outcome = await self.bridge.call_tool(
                session, name, dict(params.arguments or {}), transport="mcp"
            )
        except Rejected as exc:
            self.bridge.metrics.rejections.labels(exc.kind).inc()
            return error_result(exc.reason)
        if outcome.is_error:
            return error_result(outcome.message)
        structured = None
        if outcome.body[:1] == b"{":
            try:
                value = orjson.loads(outcome.body)
                structured = value if isinstance(value, dict) else None
            except orjson.JSONDecodeError:
                pass
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.message)], structured_content=structured
        )
