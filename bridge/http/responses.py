"""Responses: ``error`` is the one-line ``{"detail": ...}`` refusal (``refusal`` for a service
``Rejected``, its status from ``STATUS``); ``jsonrpc_error`` the same refusal as a JSON-RPC error
body, what ``/mcp`` answers before a request reaches the MCP endpoint (the guard's limits, a bridge
still starting, an owner replica that did not answer); ``upstream_response`` relays the upstream's
answer unchanged (status, body, content type, Set-Cookie).

Every refusal the bridge makes names its failure in Gym's words (``bridge.failures``): a REST body
is ``{"detail", "failure_kind", "failure_reason", "terminal"}`` (``error_body``), a JSON-RPC error
carries the same three keys as its ``error.data``. The upstream's own answers are relayed untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from bridge import exactjson, failures
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
    "expired": 409,
    "token_expired": 401,
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
    "draining": 503,
    "cap": 503,
    "budget": 503,
}


def refusal(exc: Rejected) -> Response:
    return error(STATUS.get(exc.kind, 400), exc.reason, exc.retry_after, exc.kind)


def error(status: int, reason: str, retry_after: int | None = None, kind: str | None = None) -> Response:
    """A one-line refusal, ``{"detail": reason}`` with its failure in Gym's words (``error_body``)."""
    headers = {"retry-after": str(retry_after)} if retry_after is not None else None
    return Response(
        error_body(status, reason, kind), status_code=status, media_type="application/json", headers=headers
    )


def error_body(status: int, reason: str, kind: str | None = None) -> bytes:
    """The JSON of a REST refusal: ``detail`` and the failure ``kind`` is (else the one ``status``
    implies: ``failures.of``)."""
    return exactjson.dumps(failures.refusal_body(reason, kind, status))


def jsonrpc_error(
    status: int,
    reason: str,
    request_id: int | str | None = None,
    code: int | None = None,
    kind: str | None = None,
) -> bytes:
    """A one-line refusal on ``/mcp`` as a JSON-RPC error body: ``code``, else -32603 (internal
    error) for a 5xx status and -32600 (invalid request) for any other; ``data`` names the failure
    in Gym's words (``kind``, else what ``status`` implies)."""
    if code is None:
        code = -32603 if status >= 500 else -32600
    error = {"code": code, "message": reason, "data": failures.of(kind, reason, status).fields()}
    return exactjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


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
