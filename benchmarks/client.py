"""The benchmarks' HTTP client: a keep-alive HTTP/1.1 connection on a raw asyncio protocol (httptools
parses the answers), cheap enough that the core it shares with the upstream is rarely what a run
measures; the requests every benchmark sends and the one way their answers are read."""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
import orjson

from benchmarks.procs import BenchError

TOKEN_HEADER = "X-NeMo-Gym-Session-Token"
MCP_ACCEPT = "application/json, text/event-stream"


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 client connection; one exchange at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.waiter: asyncio.Future[tuple[int, bytes, list[bytes]]] | None = None
        self.body: list[bytes] = []
        self.cookies: list[bytes] = []
        self.mcp_session: str | None = None  # the last answer's ``Mcp-Session-Id``, if it had one
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(BenchError(f"connection closed mid-call: {exc}"))

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"set-cookie":
            self.cookies.append(value)
        elif name.lower() == b"mcp-session-id":
            self.mcp_session = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, cookies, self.body, self.cookies = b"".join(self.body), self.cookies, [], []
        if self.waiter is not None:
            self.waiter.set_result((self.parser.get_status_code(), body, cookies))

    async def call(self, request: bytes) -> tuple[int, bytes, list[bytes]]:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


async def connect(url: str) -> Conn:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    _, conn = await asyncio.get_running_loop().create_connection(Conn, host, int(port))
    return conn


def request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST {path} HTTP/1.1\r\ncontent-type: application/json\r\n{head}content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def seed_body(initial: int) -> bytes:
    return orjson.dumps({"responses_create_params": {"input": []}, "initial_count": initial})


def tools_call(tool: str, arguments: dict[str, Any], id_: int = 1) -> bytes:
    params = {"name": tool, "arguments": arguments}
    return orjson.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params})


def decode_rpc(name: str, status: int, body: bytes) -> Any:
    """A ``tools/call`` answer's structured result; BenchError on an HTTP, JSON-RPC or tool error."""
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
