"""The keep-alive pool against a deliberately misbehaving upstream: one exchange, one response.

No real Gym server sends any of this, so the upstream here is a small raw asyncio TCP server that
answers ``POST /<mode>`` with ``{"id": <the request's id>, "conn": <its connection number>}`` and
misbehaves as ``<mode>`` says: extra bytes after a complete response (same read or later), two
responses for one request, an unsolicited answer on an idle connection (also racing the reuse),
malformed HTTP, no answer in time, ``connection: close`` without closing. After each, the NEXT caller
on the same pool must get its own answer (its id, on a fresh connection) and the misbehaving
connection must have been closed by the client. Unsafe paths and headers are refused before a byte
is written (the server sees no request), by the pool, ``Upstream.post`` and the httpx path alike.
The pool is bounded: past the bound a request waits for a connection (counted as queued, its wait
counted by seconds) as long as that takes, never against its own budget, which bounds the exchange
alone (a probe bounds its wait too); a burst leaves at most ``max_idle`` idle connections and the
sweep closes those after ``expiry_s``, and a connect that fails for want of a descriptor waits and
connects again, logged; a request the upstream fails (the caller's 502) is logged too.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import select
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bridge import metrics
from bridge.settings import Settings
from bridge.upstream import Upstream, UpstreamRequestRefused, UpstreamUnavailable
from bridge.upstream.poolstats import WAIT_BUCKETS
from bridge.upstream.transport import ConnectTimeout, KeepAlivePool, PoolStats
from tests.fixtures.bridges import free_port

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),  # the loop the bridge serves on
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend


def response(rid: Any, conn: int, extra_headers: bytes = b"") -> bytes:
    body = json.dumps({"id": rid, "conn": conn}).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        len(body),
        extra_headers,
        body,
    )


class Misbehaving:
    """Raw HTTP/1.1 upstream; each connection handles its requests one at a time, in order."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[int, str, Any]] = []  # (connection, path, id)
        self.closed: set[int] = set()  # connections the client closed (EOF seen)
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers.values():
            writer.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        self.writers[conn] = writer
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                _, path, _ = head.split("\r\n", 1)[0].split(" ")
                length = next(
                    int(line.split(":", 1)[1])
                    for line in head.split("\r\n")
                    if line.lower().startswith("content-length:")
                )
                rid = json.loads(await reader.readexactly(length))["id"]
                self.requests.append((conn, path, rid))
                await self.answer(path, rid, conn, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.add(conn)
            writer.close()

    async def answer(self, path: str, rid: Any, conn: int, writer: asyncio.StreamWriter) -> None:
        if path.startswith("/extra_"):  # bytes right after the response, in the same write or 20 ms later
            extra = b"garbage" if "garbage" in path else b"HTTP/1.1 200 OK\r\n"  # or a response's start
            if not path.endswith("_later"):
                writer.write(response(rid, conn) + extra)
            else:
                writer.write(response(rid, conn))
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(extra)
        elif path == "/two_responses":  # what the smuggled second request produced
            writer.write(response(rid, conn) + response("smuggled", conn))
        elif path == "/unsolicited_later":  # a second response ~50 ms after the first
            writer.write(response(rid, conn))
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(response("unsolicited", conn))
        elif path == "/malformed":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: twelve\r\n\r\n{}")
        elif path == "/slow":  # answers, but only after the caller's budget
            await asyncio.sleep(0.3)
            writer.write(response(rid, conn))
        elif path == "/connection_close":  # says close, then keeps the connection open
            writer.write(response(rid, conn, b"connection: close\r\n"))
        else:
            writer.write(response(rid, conn))
        await writer.drain()


@pytest.fixture
async def upstream() -> AsyncIterator[Misbehaving]:
    server = Misbehaving()
    await server.start()
    yield server
    await server.stop()


def new_pool(server: Misbehaving) -> KeepAlivePool:
    return KeepAlivePool(server.url, max_connections=8, expiry_s=60.0, connect_timeout_s=2.0)


async def call(pool: KeepAlivePool, path: str, rid: Any, timeout: float | None = 2.0) -> dict[str, Any]:
    status, _, body = await pool.post(path, json.dumps({"id": rid}).encode(), JSON, timeout)
    assert status == 200
    answer: dict[str, Any] = json.loads(body)
    return answer


async def closed_by_client(server: Misbehaving, conn: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while conn not in server.closed and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return conn in server.closed


async def next_caller_gets_its_own_answer(pool: KeepAlivePool, server: Misbehaving, bad_conn: int) -> None:
    for rid in (2, 3):  # twice: the second call reuses whatever the first one left in the pool
        answer = await call(pool, "/ok", rid)
        assert answer["id"] == rid, f"caller {rid} read another caller's answer: {answer}"
        assert answer["conn"] != bad_conn
    assert await closed_by_client(server, bad_conn), "the misbehaving connection was not closed"
    assert all(not conn.closed and conn.quiet() for conn in pool.idle)


async def test_a_well_behaved_connection_is_reused(
    upstream: Misbehaving, anyio_backend: tuple[str, dict[str, Any]]
) -> None:
    uvloop = anyio_backend[1].get("use_uvloop", False)
    assert ("uvloop" in type(asyncio.get_running_loop()).__module__) == uvloop
    pool = new_pool(upstream)
    try:
        first = await call(pool, "/ok", 1)
        second = await call(pool, "/ok", 2)
        assert (first["id"], second["id"]) == (1, 2)
        assert first["conn"] == second["conn"] and upstream.connections == 1
        assert len(pool.idle) == 1
    finally:
        pool.close()


@pytest.mark.parametrize("mode", ["/extra_bytes", "/extra_garbage", "/two_responses", "/connection_close"])
async def test_bytes_beyond_the_response_in_the_same_read_close_the_connection(
    upstream: Misbehaving, mode: str
) -> None:
    pool = new_pool(upstream)
    try:
        first = await call(pool, mode, 1)
        assert first["id"] == 1  # the caller still gets the complete response it was sent
        assert pool.idle == []
        await next_caller_gets_its_own_answer(pool, upstream, first["conn"])
    finally:
        pool.close()


@pytest.mark.parametrize("mode", ["/extra_bytes_later", "/extra_garbage_later", "/unsolicited_later"])
async def test_anything_arriving_on_an_idle_connection_closes_it(upstream: Misbehaving, mode: str) -> None:
    pool = new_pool(upstream)
    try:
        first = await call(pool, mode, 1)
        assert first["id"] == 1
        await asyncio.sleep(0.15)  # the late bytes arrive while the connection sits in the pool
        assert await closed_by_client(upstream, first["conn"], within=0.5)
        await next_caller_gets_its_own_answer(pool, upstream, first["conn"])
    finally:
        pool.close()


async def test_a_late_answer_racing_the_reuse_is_not_read_by_the_next_caller(upstream: Misbehaving) -> None:
    """The unsolicited answer is in the socket but the event loop has not delivered it yet when the
    next caller takes the connection: the zero-timeout poll before reuse must catch it."""
    pool = new_pool(upstream)
    try:
        first = await call(pool, "/ok", 1)
        (idle,) = pool.idle
        sock = idle.transport.get_extra_info("socket") if idle.transport else None
        assert sock is not None
        # No await from here to the next call: data_received cannot run in between.
        upstream.writers[first["conn"]].write(response("unsolicited", first["conn"]))
        readable, _, _ = select.select([sock.fileno()], [], [], 2.0)  # blocks the loop on purpose
        assert readable
        answer = await call(pool, "/ok", 2)
        assert answer["id"] == 2, f"the next caller read the unsolicited answer: {answer}"
        assert answer["conn"] != first["conn"]
        await next_caller_gets_its_own_answer(pool, upstream, first["conn"])
    finally:
        pool.close()


async def test_malformed_http_fails_the_call_and_closes_the_connection(upstream: Misbehaving) -> None:
    pool = new_pool(upstream)
    try:
        await call(pool, "/ok", 0)
        (bad_conn,) = {conn for conn, _, _ in upstream.requests}
        with pytest.raises(ConnectionError, match="malformed HTTP response"):
            await call(pool, "/malformed", 1)
        assert pool.idle == []
        await next_caller_gets_its_own_answer(pool, upstream, bad_conn)
    finally:
        pool.close()


async def test_a_timed_out_call_closes_its_connection(upstream: Misbehaving) -> None:
    """The upstream answers after the budget: were the connection reused, that late answer would be
    the next caller's."""
    pool = new_pool(upstream)
    try:
        with pytest.raises(TimeoutError):
            await call(pool, "/slow", 1, timeout=0.1)
        assert pool.idle == []
        await next_caller_gets_its_own_answer(pool, upstream, bad_conn=1)
    finally:
        pool.close()


async def test_a_call_cancelled_mid_flight_closes_its_connection(upstream: Misbehaving) -> None:
    pool = new_pool(upstream)
    try:
        task = asyncio.create_task(call(pool, "/slow", 1))
        while not upstream.requests:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.idle == []
        await next_caller_gets_its_own_answer(pool, upstream, bad_conn=1)
    finally:
        pool.close()


BAD_PATHS = [
    "/get_counter_value HTTP/1.1\r\nhost: x\r\n\r\nPOST /increment_counter",  # the smuggling
    "/tool\r\n",
    "/tool\n",
    "/tool\x00",
    "",
    "/",
    "tool",
    "/" + "a" * 129,
    "/a b",
    "/a/b",
    "/a?b=1",
    "/%0d%0a",
    "/caf\u00e9",
    "/\u2603",
    "/ng-rollout/.x/seed_session",  # an id breaking nemo-gym's ROLLOUT_ID_PATTERN
    "/ng-rollout/-x/seed_session",
    "/ng-rollout//seed_session",
    "/ng-rollout/a b/seed_session",
    "/ng-rollout/a\n/seed_session",
    "/ng-rollout/x/seed_session\n",
    "/ng-rollout/x",
]
BAD_HEADERS = [
    {"cookie": "a=1\r\npost /x http/1.1"},
    {"cookie": "a=1\nx: y"},
    {"cookie": "a=1\r"},
    {"cookie": "a=\x00"},
    {"cookie": "a=\x1b[31m"},
    {"cookie": "a=\x7f"},
    {"cookie": "a=\u20ac"},  # not Latin-1
    {"x-a\r\nx-b": "1"},
    {"bad name": "1"},
    {"": "1"},
    {"x-\u00e9": "1"},
    {"content-length": "0"},
    {"Transfer-Encoding": "chunked"},
    {"host": "elsewhere"},
]


def assert_one_line_refusal(exc: BaseException) -> None:
    assert isinstance(exc, ValueError) and isinstance(exc, UpstreamRequestRefused)
    text = str(exc)
    assert text.startswith("refused to send") and "\n" not in text and "\r" not in text
    assert "post /x" not in text.lower()  # never echoes a header value (it may be a session cookie)


@pytest.mark.parametrize(
    ("path", "headers"), [(p, JSON) for p in BAD_PATHS] + [("/ok", h) for h in BAD_HEADERS]
)
async def test_the_pool_refuses_unsafe_requests_before_writing(
    upstream: Misbehaving, path: str, headers: dict[str, str]
) -> None:
    pool = new_pool(upstream)
    try:
        first = await call(pool, "/ok", 1)  # an idle pooled connection the refused request could have used
        with pytest.raises(UpstreamRequestRefused) as refused:
            await pool.post(path, b'{"id": 2}', headers, 2.0)
        assert_one_line_refusal(refused.value)
        await asyncio.sleep(0.05)
        assert upstream.requests == [(1, "/ok", 1)], "a refused request reached the upstream"
        answer = await call(pool, "/ok", 3)  # and the connection is still clean and reused
        assert answer == {"id": 3, "conn": first["conn"]} and upstream.connections == 1
    finally:
        pool.close()


@pytest.mark.parametrize(
    "path",
    [
        "/seed_session",
        "/verify",
        "/close_session",
        "/aggregate_metrics",
        "/get_counter_value",
        "/a.b-c_D9",
        "/" + "a" * 128,
        "/ng-rollout/7-3/seed_session",
        "/ng-rollout/" + "r" * 60_000 + "/verify",  # Gym's pattern has no length cap
    ],
)
async def test_every_path_the_bridge_posts_is_accepted(upstream: Misbehaving, path: str) -> None:
    pool = new_pool(upstream)
    try:
        headers = {**JSON, "cookie": "session=a\tb; name=caf\u00e9"}  # tab and Latin-1 are legal
        answer = await call_with(pool, path, headers)
        assert answer["id"] == 7 and upstream.requests == [(1, path, 7)]
    finally:
        pool.close()


async def call_with(pool: KeepAlivePool, path: str, headers: dict[str, str]) -> dict[str, Any]:
    status, _, body = await pool.post(path, b'{"id": 7}', headers, 2.0)
    assert status == 200
    answer: dict[str, Any] = json.loads(body)
    return answer


@pytest.mark.parametrize("via", ["pool", "httpx"])
async def test_upstream_post_raises_upstream_request_refused(upstream: Misbehaving, via: str) -> None:
    bridge_upstream = Upstream(Settings(upstream_url=upstream.url))
    try:
        post = bridge_upstream.post if via == "pool" else bridge_upstream._post_httpx
        for path, headers in [(BAD_PATHS[0], JSON), ("/ok", BAD_HEADERS[0]), ("/ok", BAD_HEADERS[6])]:
            with pytest.raises(UpstreamRequestRefused) as refused:
                await post(path, b'{"id": 1}', headers, 2.0)
            assert_one_line_refusal(refused.value)
        good = await post("/get_counter_value", b'{"id": 2}', JSON, 2.0)
        assert good.json()["id"] == 2
        await asyncio.sleep(0.05)
        assert upstream.requests == [(1, "/get_counter_value", 2)]
    finally:
        await bridge_upstream.stop()


# --------------------------------------------------------------------------------------------
# Bounded: past the bound a request waits (queued), a burst leaves no crowd of idle connections
# --------------------------------------------------------------------------------------------


async def until(predicate: Any, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return bool(predicate())


async def test_requests_past_the_bound_wait_for_a_connection_and_are_counted(upstream: Misbehaving) -> None:
    pool = KeepAlivePool(upstream.url, max_connections=3, expiry_s=60.0, connect_timeout_s=2.0)
    try:
        calls = [asyncio.ensure_future(call(pool, "/slow", rid, timeout=30)) for rid in range(12)]
        assert await until(lambda: pool.stats().queued == 9)
        assert pool.stats() == PoolStats(busy=3, idle=0, queued=9, limit=3)
        answers = await asyncio.gather(*calls)
        assert sorted(answer["id"] for answer in answers) == list(range(12))
        assert upstream.connections == 3, "never more connections than the bound"
        stats = pool.stats()
        assert (stats.busy, stats.idle, stats.queued, stats.limit) == (0, 3, 0, 3)
        # 9 waited: 3 for one answer of 0.3 s, 3 for two, 3 for three; counted by seconds waited
        assert sum(stats.waits) == 9 and stats.waits[WAIT_BUCKETS.index(1.0)] == 9
        assert metrics.WAIT_BUCKETS == WAIT_BUCKETS  # the histogram's bounds are the pool's
        assert 3 * (0.3 + 0.6 + 0.9) - 0.3 < stats.wait_seconds < 3 * (0.3 + 0.6 + 0.9) + 2
    finally:
        pool.close()


async def test_the_wait_for_a_connection_never_counts_against_the_budget(upstream: Misbehaving) -> None:
    """A request queued behind answers that take longer than its own budget still gets its answer:
    the budget bounds the exchange alone (0.3 s queued, then an immediate answer within 0.2 s); a
    budget of None sets no timer at all."""
    pool = KeepAlivePool(upstream.url, max_connections=1, expiry_s=60.0, connect_timeout_s=2.0)
    try:
        first = asyncio.ensure_future(call(pool, "/slow", 1, timeout=None))
        assert await until(lambda: pool.stats().busy == 1)
        queued = asyncio.ensure_future(call(pool, "/ok", 2, timeout=0.2))
        assert await until(lambda: pool.stats().queued == 1)
        assert [(await first)["id"], (await queued)["id"]] == [1, 2]
        assert sum(pool.stats().waits) == 1 and pool.stats().wait_seconds > 0.2
    finally:
        pool.close()


async def test_a_probe_waits_for_a_connection_no_longer_than_its_budget(upstream: Misbehaving) -> None:
    """A GET (a readiness probe, the tool list) bounds its wait for a connection by its own budget:
    ``ConnectTimeout`` (nothing sent) rather than a probe stuck behind long calls."""
    pool = KeepAlivePool(upstream.url, max_connections=1, expiry_s=60.0, connect_timeout_s=2.0)
    try:
        busy = asyncio.ensure_future(call(pool, "/slow", 1, timeout=None))
        assert await until(lambda: pool.stats().busy == 1)
        with pytest.raises(ConnectTimeout, match=r"no free connection .* within 0\.05s"):
            await pool.get("/openapi.json", 0.05)
        assert (await busy)["id"] == 1 and [r[1] for r in upstream.requests] == ["/slow"]
    finally:
        pool.close()


async def test_a_connect_has_its_own_budget() -> None:
    """Connecting to a server whose listen queue is full (the kernel drops the handshake) fails after
    ``connect_timeout_s``, whatever the request's own budget (none here): nothing was sent."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = listener.getsockname()[1]
    fillers = [socket.socket() for _ in range(4)]
    for filler in fillers:
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
    pool = KeepAlivePool(f"http://127.0.0.1:{port}", max_connections=1, expiry_s=60.0, connect_timeout_s=0.2)
    try:
        started = time.monotonic()
        with pytest.raises(ConnectTimeout, match=r"within 0\.2s"):
            await pool.post("/ok", b"{}", JSON, None)
        assert time.monotonic() - started < 5
    finally:
        pool.close()
        for sock in (*fillers, listener):
            sock.close()


async def test_a_burst_leaves_at_most_max_idle_connections_and_the_sweep_closes_those(
    upstream: Misbehaving,
) -> None:
    pool = KeepAlivePool(upstream.url, max_connections=16, expiry_s=0.5, connect_timeout_s=2.0, max_idle=2)
    try:
        answers = await asyncio.gather(*(call(pool, "/slow", rid, timeout=30) for rid in range(16)))
        assert sorted(answer["id"] for answer in answers) == list(range(16)) and upstream.connections == 16
        assert len(pool.idle) == 2, "past max_idle a connection is closed when its exchange ends"
        assert await until(lambda: len(upstream.closed) == 14)
        # no request comes: the sweep closes the last two once they have been idle expiry_s
        assert await until(lambda: len(upstream.closed) == 16 and not pool.idle)
        assert pool.stats() == PoolStats(limit=16)
    finally:
        pool.close()


async def test_connections_kept_for_a_queue_are_closed_once_it_is_gone(upstream: Misbehaving) -> None:
    pool = KeepAlivePool(upstream.url, max_connections=16, expiry_s=60.0, connect_timeout_s=2.0, max_idle=2)
    try:
        paths = ["/slow" if rid % 3 == 0 else "/ok" for rid in range(200)]  # a queue that drains unevenly
        answers = await asyncio.gather(*(call(pool, path, rid, timeout=60) for rid, path in enumerate(paths)))
        assert sorted(answer["id"] for answer in answers) == list(range(200))
        stats = pool.stats()
        assert (stats.busy, stats.idle, stats.queued, stats.limit) == (0, 2, 0, 16), (
            "kept: max_idle, not the bound"
        )
        assert await until(lambda: len(upstream.closed) == upstream.connections - 2)
    finally:
        pool.close()


# asyncio's loop only: the test patches the loop's create_connection, which uvloop's cannot have
@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_connect_without_a_descriptor_waits_and_connects_again(
    upstream: Misbehaving, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    connect = loop.create_connection
    failures = iter([OSError(errno.EMFILE, "Too many open files")] * 3)

    async def scarce(*args: Any, **kwargs: Any) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return await connect(*args, **kwargs)

    monkeypatch.setattr(loop, "create_connection", scarce)
    pool = KeepAlivePool(upstream.url, max_connections=2, expiry_s=60.0, connect_timeout_s=5.0)
    try:
        with caplog.at_level(logging.WARNING, "gym_mcp_bridge.transport"):
            assert (await call(pool, "/ok", 1, timeout=10))["id"] == 1
        assert next(failures, None) is None and upstream.requests == [(1, "/ok", 1)]
        assert any(
            "[Errno 24] Too many open files" in r.message and "waits and connects again" in r.message
            for r in caplog.records
        ), caplog.text
    finally:
        pool.close()


async def test_a_request_the_upstream_fails_is_logged_once_a_second_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nothing_there = f"http://127.0.0.1:{free_port()}"  # connection refused: the caller's 502
    bridge_upstream = Upstream(Settings(upstream_url=nothing_there))
    try:
        with caplog.at_level(logging.WARNING, "gym_mcp_bridge.upstream"):
            for _ in range(3):
                with pytest.raises(UpstreamUnavailable):
                    await bridge_upstream.post("/ok", b'{"id": 1}', JSON, 2.0)
        lines = [r.message for r in caplog.records if r.message.startswith("upstream failed on /ok: ")]
        assert len(lines) == 1 and lines[0].endswith("(1 such failures since the last line)"), caplog.text
    finally:
        await bridge_upstream.stop()
