"""A keep-alive HTTP/1.1 client on a raw asyncio protocol (httptools parses the answers): the load
generator of ``benchmarks/capacity.py``, cheap enough that the core it shares with the upstream is
rarely what a run measures. ``Conn.call`` sends one request and waits for its whole answer (status,
body, ``Set-Cookie`` values); ``request`` builds a ``POST`` with a JSON body.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools

from benchmarks.procs import BenchError


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 client connection; one exchange at a time (httptools parses)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.waiter: asyncio.Future[tuple[int, bytes, list[bytes]]] | None = None
        self.body: list[bytes] = []
        self.cookies: list[bytes] = []
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


def request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST {path} HTTP/1.1\r\ncontent-type: application/json\r\n{head}content-length: {len(body)}\r\n\r\n"
    ).encode() + body
