"""``/mcp`` answers what is no MCP message with the protocol's error, and reads routing headers as HTTP
fields, against a running bridge (raw bytes over httpx or a socket, no MCP client to tidy them up).

- An ``id`` that is null, an object, an array, a fraction or a boolean: 400 with JSON-RPC -32600 and
  ``id: null`` (JSON-RPC 2.0; MCP requires a string or integer id), not the 202 of a notification.
  Sent as a ``tools/call`` (the fast path's triage sees it first) and as a ``tools/list`` (the SDK's
  only), on the handshake wire and on 2026-07-28.
- Not a request at all (not an object, ``jsonrpc`` other than "2.0", no method): -32600 with the id
  when it is valid, never -32602 with pydantic's text; a batch: -32600 (MCP removed batching in
  2025-06-18). A notification (no id member) and a client's response keep their 202.
- A ``text/plain`` body: a JSON-RPC error body (415), not a plain-text 400.
- Optional whitespace around ``Mcp-Method`` / ``Mcp-Name`` values (RFC 9110 section 5.5) is trimmed
  before the 2026-07-28 header check, on the fast path and on the SDK path; a name that still differs
  is refused -32020 as before.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess
from tests.fixtures.helpers import MCP_HEADERS, metric, post_once, seed

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}
BAD_IDS = [None, {"a": 1}, [1], 1.5, True]


def post(bridge: BridgeProcess, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{bridge.url}/mcp", content=content, headers={**MCP_HEADERS, **(headers or {})}, timeout=30
    )


def refused(response: httpx.Response, code: int = -32600, request_id: Any = None) -> str:
    """The message of a 400 JSON-RPC error ``code`` answered with ``request_id``."""
    assert response.status_code == 400, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == request_id, answer
    assert answer["error"]["code"] == code, answer
    message = str(answer["error"]["message"])
    assert "validation error" not in message.lower() and "\n" not in message, message
    return message


def test_an_id_neither_string_nor_integer_is_an_invalid_request(counter_bridge: BridgeProcess) -> None:
    token = seed(counter_bridge)
    modern = {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "get_counter_value"}
    before = metric(counter_bridge, "gym_mcp_bridge_rejections_total", reason="jsonrpc")
    for request_id in BAD_IDS:
        call = {"name": "get_counter_value", "arguments": {}}
        cases: list[tuple[dict[str, Any], dict[str, str]]] = [
            ({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": call}, {HEADER: token}),
            ({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}, {}),
            (
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {**call, "_meta": META},
                },
                {**modern, HEADER: token},
            ),
        ]
        for message, headers in cases:
            text = refused(post(counter_bridge, message, headers))
            assert "id must be a string or an integer" in text, text
    assert metric(counter_bridge, "gym_mcp_bridge_rejections_total", reason="jsonrpc") == before + 3 * len(
        BAD_IDS
    )
    # nothing ran: the counter is where the seed left it
    answer = post(
        counter_bridge,
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "get_counter_value"}},
        {HEADER: token},
    ).json()
    assert answer["id"] == 7 and answer["result"]["structuredContent"] == {"count": 0}, answer


def test_what_is_no_request_gets_invalid_request(counter_bridge: BridgeProcess) -> None:
    cases: list[tuple[Any, Any, str]] = [
        ("just a string", None, "not an object"),
        (3, None, "not an object"),
        ({"jsonrpc": "1.0", "id": 4, "method": "tools/list"}, 4, '"jsonrpc": "2.0"'),
        ({"id": "x", "method": "tools/list"}, "x", '"jsonrpc": "2.0"'),
        ({"jsonrpc": "2.0", "id": 5}, 5, "no method"),
        ({"jsonrpc": "2.0", "id": 6, "method": 6}, 6, "method must be a string"),
        ({"jsonrpc": "2.0", "id": 8, "result": {}, "error": {"code": 1, "message": "m"}}, 8, "no method"),
        ([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}], None, "batch"),
        ([], None, "batch"),
    ]
    for message, request_id, says in cases:
        text = refused(post(counter_bridge, message), request_id=request_id)
        assert says in text, (message, text)
    text = refused(
        post(counter_bridge, {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": [1]}), -32602, 9
    )
    assert "params must be an object" in text


def test_notifications_and_responses_keep_their_202(counter_bridge: BridgeProcess) -> None:
    for message in (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 3, "result": {}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "no"}},
    ):
        response = post(counter_bridge, message)
        assert response.status_code == 202 and response.content == b"", (message, response.text)
    # a valid id the SDK answers, exact past 64 bits
    wide = 2**70 + 1
    answer = post(counter_bridge, {"jsonrpc": "2.0", "id": wide, "method": "tools/list"})
    assert answer.status_code == 200 and answer.json()["id"] == wide


def test_a_body_that_is_not_json_typed_gets_a_json_rpc_error(counter_bridge: BridgeProcess) -> None:
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        response = post(counter_bridge, message, {"content-type": content_type})
        assert response.status_code == 415, response.text
        answer = response.json()
        assert answer["id"] is None and answer["error"]["code"] == -32600
        assert "Content-Type must be application/json" in answer["error"]["message"]
    response = post(counter_bridge, b"{not json")  # the SDK's own -32700 stays
    assert response.status_code == 400 and response.json()["error"]["code"] == -32700


def _modern(bridge: BridgeProcess, message: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    """``message`` as raw bytes (header values exactly as given, whitespace included), on 2026-07-28."""
    sent = {"accept": "application/json, text/event-stream", "mcp-protocol-version": MODERN, **headers}
    status, _, body = anyio.run(lambda: post_once(bridge.url, "/mcp", message, sent, timeout=30))
    return status, json.loads(body)


@pytest.mark.parametrize("pad", ["  ", "\t", " \t "])
def test_optional_whitespace_around_routing_headers_is_trimmed(
    counter_bridge: BridgeProcess, pad: str
) -> None:
    token = seed(counter_bridge)
    call = {"name": "get_counter_value", "arguments": {}, "_meta": META}
    plain = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    headers = {
        "mcp-method": f"{pad}tools/call{pad}",
        "mcp-name": f"{pad}get_counter_value{pad}",
        HEADER: token,
    }
    # the fast path answers the plain call; an extra envelope member sends the same call to the SDK
    for message in (plain, {**plain, "extra": 1}):
        status, answer = _modern(counter_bridge, message, headers)
        assert status == 200, answer
        assert answer["result"]["structuredContent"] == {"count": 0}, answer
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": META}}
    status, answer = _modern(counter_bridge, listing, {"mcp-method": f"{pad}tools/list"})
    assert status == 200 and {t["name"] for t in answer["result"]["tools"]} >= {"get_counter_value"}, answer
    # trimmed, a name that differs is still refused
    status, answer = _modern(counter_bridge, plain, {**headers, "mcp-name": f"{pad}increment_counter{pad}"})
    assert status == 400 and answer["error"]["code"] == -32020, answer
