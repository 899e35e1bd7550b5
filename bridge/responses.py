"""HTTP request parsing and responses shared by the REST surface and verify.

``read_object`` enforces the body limits and the JSON-object shape before anything else runs;
``error`` is the one-line ``{"detail": ...}`` refusal; ``upstream_response`` relays the
upstream's answer unchanged (status, body, content type, Set-Cookie).
"""

from __future__ import annotations

import re
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge.core import Rejected
from bridge.upstream import UpstreamResponse


def error(status: int, reason: str, retry_after: int | None = None) -> JSONResponse:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"detail": reason}, status_code=status, headers=headers)


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json", headers=headers)


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_SCAN_INLINE_BYTES = 256 * 1024


def json_too_deep(body: bytes, limit: int) -> bool:
    """Whether the JSON text nests arrays/objects deeper than ``limit`` (strings are skipped).

    Cheap on ordinary bodies: with no more brackets than ``limit`` it cannot be too deep."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for byte in _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKET):
        if byte in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


async def json_too_deep_async(body: bytes, limit: int) -> bool:
    """``json_too_deep``, off the event loop for large bodies (the scan is linear in Python)."""
    if len(body) < _SCAN_INLINE_BYTES or body.count(b"[") + body.count(b"{") <= limit:
        return json_too_deep(body, limit)
    return await anyio.to_thread.run_sync(json_too_deep, body, limit)


async def read_object(
    request: Request, limit: int, max_depth: int | None = None
) -> tuple[bytes, dict[str, Any]]:
    """The body as bytes and as a JSON object; Rejected with 400/413 otherwise."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Rejected(f"request body too large ({declared} bytes, limit {limit})", 413, "body_size")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Rejected(f"request body too large (over {limit} bytes)", 413, "body_size")
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        return b"{}", {}
    if max_depth is not None and await json_too_deep_async(body, max_depth):
        raise Rejected(
            f"JSON body nested too deeply (limit {max_depth} levels; max_json_depth)", 400, "json_depth"
        )
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Rejected(f"malformed JSON body: {exc}".splitlines()[0], 400, "json") from exc
    if not isinstance(value, dict):
        raise Rejected(f"request body must be a JSON object, got {type(value).__name__}", 400, "json")
    return body, value


def add_cookies(response: Response, set_cookies: list[str]) -> Response:
    for cookie in set_cookies:
        response.raw_headers.append((b"set-cookie", cookie.encode("latin-1")))
    return response


def upstream_response(response: UpstreamResponse) -> Response:
    """The upstream's answer as-is: status, body, content type, Set-Cookie."""
    out = Response(response.content, status_code=response.status_code, media_type=response.content_type)
    return add_cookies(out, response.header_list("set-cookie"))
