"""Responses: ``error`` is the one-line ``{"detail": ...}`` refusal (``refusal`` for a service
``Rejected``, its status from ``STATUS``); ``jsonrpc_error`` the same refusal as a JSON-RPC error
body, what ``/mcp`` answers before a request reaches the MCP endpoint (the guard's limits, a bridge
still starting, an owner replica that did not answer); ``upstream_response`` relays the upstream's
answer unchanged (status, body, content type, Set-Cookie).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import JSONResponse, Response

from bridge import exactjson
from bridge.upstream import UpstreamResponse

if TYPE_CHECKING:
    from bridge.admission import Rejected

# The HTTP status of each kind of refusal (``Rejected.kind``); the service decides the kind only.
STATUS = {
    "missing": 401,
    "token": 401,
    "session": 401,
    "peer": 401,
    "foreign": 401,
    "api_key": 401,
    "allow_list": 403,
    "lost": 409,
    "ended": 409,
    "retry": 422,
    "log_incomplete": 409,
    "row_tools": 400,
    "verify_body": 400,
    "json": 400,
    "json_depth": 400,
    "unknown_tool": 404,
    "unknown_route": 404,
    "tool_name": 404,
    "example_row": 404,
    "no_verify": 404,
    "body_size": 413,
    "argument_size": 413,
    "not_ready": 503,
    "cap": 503,
    "budget": 503,
}


def refusal(exc: Rejected) -> JSONResponse:
    return error(STATUS.get(exc.kind, 400), exc.reason, exc.retry_after)


def error(status: int, reason: str, retry_after: int | None = None) -> JSONResponse:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"detail": reason}, status_code=status, headers=headers)


def jsonrpc_error(status: int, reason: str, request_id: int | str | None = None) -> bytes:
    """A one-line refusal on ``/mcp`` as a JSON-RPC error body: code -32603 (internal error) for a
    5xx status, else -32600 (invalid request)."""
    code = -32603 if status >= 500 else -32600
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": reason}})


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        exactjson.dumps(payload), status_code=status, media_type="application/json", headers=headers
    )


def add_cookies(response: Response, set_cookies: list[str]) -> Response:
    for cookie in set_cookies:
        response.raw_headers.append((b"set-cookie", cookie.encode("latin-1")))
    return response


def upstream_response(response: UpstreamResponse) -> Response:
    """The upstream's answer as-is: status, body, content type, Set-Cookie."""
    out = Response(response.content, status_code=response.status_code, media_type=response.content_type)
    return add_cookies(out, response.header_list("set-cookie"))
