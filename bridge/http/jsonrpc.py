"""What ``/mcp`` accepts as a message, judged before the MCP SDK reads it.

The SDK's transport takes a message whose ``id`` is null, an object, an array, a fraction or a
boolean for a notification (202, nothing runs, the sender never learns why), and answers anything
that is not a JSON-RPC message at all with -32602 and pydantic's union text. JSON-RPC 2.0 answers
both with -32600 Invalid Request, and MCP requires a request id to be a string or an integer (never
null). So ``invalid_message`` judges a ``POST /mcp`` body the fast path declined, before the SDK
sees it:

- a Content-Type other than ``application/json``: 415, as a JSON-RPC error (the SDK's own answer is
  a plain-text 400);
- not an object: -32600; an array is a JSON-RPC batch, which MCP removed in revision 2025-06-18
  and the SDK serves in no revision: -32600;
- ``jsonrpc`` other than ``"2.0"``, a ``method`` that is not a string, an ``id`` that is not a
  string or an integer: -32600;
- ``params`` that is not an object: -32602 (MCP's parameters are named);
- no ``method``: only a response (exactly one of ``result`` and ``error``, an id) goes on; anything
  else is -32600.

Every refusal is HTTP 400 (the SDK's status for -32600 and -32602) and carries the id when the
message has a valid one, else ``null``. A body that is not JSON goes on to the SDK, whose -32700
Parse error answer is already a JSON-RPC error; so do notifications (no ``id`` key), which keep
their 202.

``trim_header_values`` removes the optional whitespace (SP, HTAB) around each request header value,
as HTTP field parsing must (RFC 9110 section 5.5) and the ASGI server does not, so the 2026-07-28
routing headers (``Mcp-Method``, ``Mcp-Name``) are compared with the body by their values.
"""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import Counter
from starlette.types import Scope, Send

from bridge import exactjson
from bridge.http.responses import jsonrpc_error

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
_OWS = b" \t"


def trim_header_values(scope: Scope) -> None:
    """Strip optional whitespace around ``scope``'s header values, in place (the list is replaced
    only when some value has any)."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for _, value in headers:
        if value and (value[0] in _OWS or value[-1] in _OWS):
            scope["headers"] = [(name, value.strip(_OWS)) for name, value in headers]
            return


async def refused(headers: dict[bytes, bytes], body: bytes, send: Send, rejections: Counter) -> bool:
    """Answer a ``POST /mcp`` that is no message MCP takes (``invalid_message``), counted under
    ``jsonrpc``; False (nothing sent) for one that goes on to the SDK."""
    refusal = invalid_message(headers, body)
    if refusal is None:
        return False
    status, payload = refusal
    rejections.labels("jsonrpc").inc()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))],
        }
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})
    return True


def invalid_message(headers: dict[bytes, bytes], body: bytes) -> tuple[int, bytes] | None:
    """(HTTP status, JSON-RPC error body) refusing a ``POST /mcp``, or None when the message goes on
    to the SDK (see the module docstring)."""
    if not _json_content_type(headers.get(b"content-type")):
        unsupported = "Unsupported Media Type: Content-Type must be application/json"
        return 415, jsonrpc_error(415, unsupported, code=INVALID_REQUEST, kind="jsonrpc")
    try:
        message: Any = exactjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # the SDK's -32700
    reason, code = _judge(message)
    if reason is None:
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    if not _valid_id(request_id):
        request_id = None
    prefix = "Invalid Request" if code == INVALID_REQUEST else "Invalid params"
    return 400, jsonrpc_error(400, f"{prefix}: {reason}", request_id, code, kind="jsonrpc")


def _judge(message: Any) -> tuple[str | None, int]:
    """Why ``message`` is no JSON-RPC message MCP takes (and the error code), or (None, 0)."""
    if isinstance(message, list):
        return (
            "a JSON-RPC batch (an array); MCP removed batching in revision 2025-06-18: send one "
            "message per POST",
            INVALID_REQUEST,
        )
    if not isinstance(message, dict):
        return f"the message is a JSON {_kind(message)}, not an object", INVALID_REQUEST
    if message.get("jsonrpc") != "2.0":
        return 'the message needs "jsonrpc": "2.0"', INVALID_REQUEST
    if "method" not in message:
        if ("result" in message) == ("error" in message):
            return (
                "no method: a request needs a method (a response, exactly one of result or error)",
                INVALID_REQUEST,
            )
        request_id = message.get("id")
        if not (_valid_id(request_id) or ("error" in message and request_id is None)):
            return "a response's id must be a string or an integer", INVALID_REQUEST
        error = message.get("error", {"code": 0, "message": ""})
        if not (
            isinstance(error, dict)
            and type(error.get("code")) is int
            and isinstance(error.get("message"), str)
        ):
            return (
                "an error response needs error.code (an integer) and error.message (a string)",
                INVALID_REQUEST,
            )
        return None, 0  # a response from the client: the SDK's
    if not isinstance(message["method"], str):
        return "method must be a string", INVALID_REQUEST
    if "id" in message and not _valid_id(message["id"]):
        kind = _kind(message["id"])
        why = " (MCP allows no null id; a notification has no id member)" if kind == "null" else ""
        return f"id must be a string or an integer, not {kind}{why}", INVALID_REQUEST
    if "params" in message and not isinstance(message["params"], dict):
        return "params must be an object", INVALID_PARAMS
    return None, 0


def _valid_id(value: Any) -> bool:
    return type(value) is int or type(value) is str


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number" if isinstance(value, int) else "fraction"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _json_content_type(value: bytes | None) -> bool:
    """The media type is ``application/json`` (parameters such as charset aside), as the SDK's
    transport reads it."""
    if value is None:
        return False
    media = value.split(b";", 1)[0]
    return any(part.strip().lower() == b"application/json" for part in media.split(b","))
