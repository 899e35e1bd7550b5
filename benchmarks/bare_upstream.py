"""A benchmark instrument: the cheapest correct server of Gym's counter contract, so that a benchmark
in front of it measures what sits in front of it (the bridge, nginx) and not Gym.

It answers what ``example_session_state_mgmt`` answers for the calls the bridge makes
(``tests/test_bench_floors.py`` plays the same calls against both): ``/seed_session``,
``/increment_counter``, ``/get_counter_value``, ``/verify`` (reward 1.0 when the counter equals
``expected_count``), ``/aggregate_metrics``, ``GET /openapi.json``, and ``/echo`` (not Gym's: the
64 KiB workload). Every answer sets the session cookie, as Gym's ``SessionMiddleware`` does; a
``count`` that is not an integer gets 422. One ``asyncio.Protocol`` on uvloop with httptools.

    python -m benchmarks.bare_upstream [--port 0]    # prints "port N" first, then serves on 127.0.0.1
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from typing import Any

import httptools
import orjson
import uvloop

COOKIE = "bare_counter_session"
_COOKIE_TAIL = b"; path=/; Max-Age=1209600; httponly; samesite=lax"
_SCHEMA_INT = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
_SCHEMA_ECHO = {"type": "object", "properties": {"data": {"type": "string"}}, "required": ["data"]}
_SCHEMA_ANY = {"type": "object", "additionalProperties": True}


def _post(summary: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "OK"}}}
    if schema is not None:
        operation["requestBody"] = {"content": {"application/json": {"schema": schema}}, "required": True}
    return {"post": operation}


OPENAPI = orjson.dumps(
    {
        "openapi": "3.1.0",
        "info": {"title": "bare counter (benchmark instrument)", "version": "1"},
        "paths": {
            "/seed_session": _post("Seed Session", _SCHEMA_ANY),
            "/verify": _post("Verify", _SCHEMA_ANY),
            "/aggregate_metrics": _post("Aggregate Metrics", _SCHEMA_ANY),
            "/increment_counter": _post("Increment Counter", _SCHEMA_INT),
            "/get_counter_value": _post("Get Counter Value", None),
            "/echo": _post("Echo: answers its data unchanged", _SCHEMA_ECHO),
        },
    }
)
_REASONS = {200: b"OK", 404: b"Not Found", 405: b"Method Not Allowed", 422: b"Unprocessable Entity"}


class Counter:
    """The state: session id -> counter. Ids are this process's own sequence (an instrument, not a
    security boundary)."""

    def __init__(self) -> None:
        self.counters: dict[bytes, int] = {}
        self.ids = itertools.count(1)

    def session(self, cookie: bytes | None) -> bytes:
        if cookie:
            for part in cookie.split(b";"):
                name, _, value = part.strip().partition(b"=")
                if name == COOKIE.encode() and value:
                    return value
        return b"s%d" % next(self.ids)

    def handle(
        self, method: bytes, path: bytes, cookie: bytes | None, body: bytes
    ) -> tuple[int, bytes, bytes]:
        """(status, body, session id) for one request."""
        sid = self.session(cookie)
        if method == b"GET":
            return (200, OPENAPI, sid) if path == b"/openapi.json" else (404, b'{"detail":"Not Found"}', sid)
        if method != b"POST":
            return 405, b'{"detail":"Method Not Allowed"}', sid
        try:
            data = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            return 422, b'{"detail":"body is not JSON"}', sid
        if not isinstance(data, dict):
            return 422, b'{"detail":"body is not a JSON object"}', sid
        if path == b"/increment_counter":
            count = data.get("count")
            if type(count) is not int:
                return 422, b'{"detail":[{"type":"int_parsing","loc":["body","count"]}]}', sid
            self.counters[sid] = self.counters.get(sid, 0) + count
            return 200, b'{"success":true}', sid
        if path == b"/get_counter_value":
            return 200, b'{"count":%d}' % self.counters.setdefault(sid, 0), sid
        if path == b"/echo":
            if not isinstance(data.get("data"), str):
                return 422, b'{"detail":[{"type":"string_type","loc":["body","data"]}]}', sid
            return 200, orjson.dumps({"data": data["data"]}), sid
        if path == b"/seed_session":
            initial = data.get("initial_count", 0)
            self.counters.setdefault(sid, initial if type(initial) is int else 0)
            return 200, b"{}", sid
        if path == b"/verify":
            known = sid in self.counters
            reward = float(known and data.get("expected_count") == self.counters[sid])
            echoed = {k: v for k, v in data.items() if k != "expected_count"}  # Gym's response model drops it
            return 200, orjson.dumps({**echoed, "reward": reward}), sid
        if path == b"/aggregate_metrics":
            return 200, b"{}", sid
        return 404, b'{"detail":"Not Found"}', sid


class _Http(asyncio.Protocol):
    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url = b""
        self.cookie: bytes | None = None
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.cookie, self.body = b"", None, []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"cookie":
            self.cookie = value if self.cookie is None else self.cookie + b"; " + value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        status, body, sid = self.counter.handle(
            method, self.url.split(b"?", 1)[0], self.cookie, b"".join(self.body)
        )
        keep = self.parser.should_keep_alive()
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nset-cookie: %s=%s%s\r\n%s\r\n"
            % (
                status,
                _REASONS.get(status, b"Error"),
                len(body),
                COOKIE.encode(),
                sid,
                _COOKIE_TAIL,
                b"" if keep else b"connection: close\r\n",
            )
        )
        self.transport.write(head + body)
        if not keep:
            self.transport.close()


async def serve(host: str, port: int) -> None:
    counter = Counter()
    server = await asyncio.get_running_loop().create_server(lambda: _Http(counter), host, port, backlog=1024)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bare_upstream")
    parser.add_argument("--port", type=int, default=0)
    uvloop.run(serve("127.0.0.1", parser.parse_args().port))
