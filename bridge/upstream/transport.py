"""The raw HTTP/1.1 keep-alive client: the pool and its errors.

One ``KeepAlivePool`` per ``http(s)://host:port`` it talks to: the upstream (``post``, with the
checks below) and, for forwarding, each peer replica (``send``: a request the caller serialized from
a request that already went through a server's parser, relayed byte for byte).

Requests are checked (``requestcheck.check_request``) before a byte is written: anything unsafe
raises ``UpstreamRequestRefused`` (the caller's 400) on the pooled and the httpx path alike.

A pooled connection carries one exchange at a time and goes back to the pool only when that exchange
ended exactly: one complete response and no byte beyond it. Bytes after the response (in the same
read or later), a second or pipelined response, any byte that arrives while the connection sits idle
(a late answer: checked again, with a zero-timeout poll, just before reuse), a parse error, a
timeout, a cancelled call or ``connection: close`` close it instead, so no caller ever reads an
answer meant for another. Every request reaches the upstream through ``Upstream._send``: this
pool for ``http://`` upstreams (tool calls, the tool list, the probes), httpx (``process.py``) for
``https://`` ones.

A request's budget (``timeout``; None: no limit, as Gym's own clients have none) counts the exchange
alone: from the write of the request to the end of its answer. Waiting for a free connection never
counts against it and never fails the request (a probe may bound its wait with ``wait_s``);
connecting has its own budget (``connect_timeout_s``). A connect past that budget, or a probe's wait
past ``wait_s``, raises ``ConnectTimeout`` (a ``TimeoutError``): nothing was sent, which a relay
tells apart from an exchange that timed out.

A pool is bounded: at most ``max_connections`` open at once. A request past the bound waits (queued,
first come first served) for a connection to come free, as long as that takes; so does one whose
connect fails for want of a descriptor (EMFILE, ENFILE: nothing was sent, so connecting again is
safe; the wait is not part of the connect budget), logged at most once a second. Each wait is
counted (``poolstats.Waits``; ``stats``: the ``/metrics`` histogram). At most ``max_idle``
connections are kept idle, or as many as are in use when more are (under a steady load an answered
connection serves the next request instead of a new connect), more only while requests are queued,
which take them at once; the first exchange to end past that closes the surplus; idle ones are
closed ``expiry_s`` after their last exchange by a sweep, not only when the next request finds
them: a burst leaves no crowd of idle connections behind. ``stats`` reports busy, idle, queued and
the waits for ``/metrics`` and ``/healthz``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import select
import ssl
import time
from typing import Any

import httptools
import httpx

from bridge.throttle import Throttle
from bridge.upstream.gate import Gate, behind
from bridge.upstream.poolstats import PoolStats, Waits
from bridge.upstream.requestcheck import check_request

log = logging.getLogger("gym_mcp_bridge.transport")

_NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE})  # connect failed for want of a descriptor
_DESCRIPTOR_RETRY_S = 0.05
MAX_IDLE = 256  # idle connections kept at most, whatever the bound (a burst leaves no crowd behind)


class UpstreamUnavailable(Exception):
    """The upstream could not be reached or failed mid-request (502)."""


class UpstreamTimeout(Exception):
    """The upstream did not answer within the operator's limit (504)."""


class ConnectTimeout(TimeoutError):
    """No connection within the connect budget (or a probe's wait): nothing was sent."""


class _ExtraResponse(Exception):
    """A second response began on a connection with no request waiting (stops the parser)."""


class _Exchange(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to the upstream; httptools parses the responses.

    ``in_flight`` is true from the write of a request to the end of its response; a byte received
    outside that window, or a second response (or the start of one, or garbage) after the complete
    one in the same read, closes the connection. (Bare CR/LF right after a response in the same read
    is skipped by llhttp, as between any two messages: it cannot form an answer.)"""

    def __init__(self, peer: str = "upstream", poll_idle: bool = True) -> None:
        self.peer = peer  # what the errors call the server: "upstream", "owner replica"
        self.poll_idle = poll_idle  # off under TLS: a session ticket is readable bytes, not an answer
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.in_flight = False
        self.idle_since = 0.0
        self.poller: Any = None  # select.poll on the socket: anything readable while idle?
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None
        self.keep_alive = True

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None and self.poll_idle and hasattr(select, "poll"):
            self.poller = select.poll()
            self.poller.register(sock.fileno(), select.POLLIN)

    def data_received(self, data: bytes) -> None:
        if not self.in_flight:
            # Idle in the pool, or its response already complete: a late, unsolicited or extra answer.
            # Whatever follows on this connection can no longer be matched to a request.
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:  # also _ExtraResponse, after the waiter got its answer
            self._fail(ConnectionError(f"malformed HTTP response from the {self.peer}: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError(f"{self.peer} closed the connection before it answered"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        if not self.in_flight:  # a second response after the complete one, in the same read
            raise _ExtraResponse

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.in_flight = False
        self.keep_alive = self.parser.should_keep_alive()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    async def exchange(
        self, request: bytes, timeout: float | None, loop: asyncio.AbstractEventLoop
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Write one request and wait for its whole response; TimeoutError after ``timeout`` seconds
        (None: as long as it takes)."""
        if self.closed or self.transport is None or self.in_flight:
            raise ConnectionError(f"{self.peer} closed the connection")
        self._reset()
        waiter = self.waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, self._fail, TimeoutError())
        try:
            self.in_flight = True
            self.transport.write(request)
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
        return self.status, self.headers, b"".join(self.body)

    def quiet(self) -> bool:
        """Nothing has arrived since the last response ended: no byte (or EOF) is waiting in the
        socket that the event loop has not delivered yet (a late answer racing a reuse)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return False
        return self.poller is None or not self.poller.poll(0)

    def close(self) -> None:
        self.closed = True
        self.in_flight = False
        if self.transport is not None:
            self.transport.close()


class KeepAlivePool:
    """Pooled keep-alive HTTP/1.1 connections to one ``http(s)://host:port``, for the hot path.

    A request is one write of the serialized request (head and body together) and one
    httptools-parsed response, without httpx's per-request machinery (its transport, pool
    bookkeeping and stream wrappers were over half of the bridge's CPU per tool call in a profile,
    and two thirds of a forwarding replica's). Idle connections are reused newest first and dropped
    after ``expiry_s`` or as soon as the server closes them or sends anything; a connection whose
    exchange did not end exactly (timed out, cancelled, failed, extra bytes) is never reused.
    ``post`` refuses unsafe requests with ``UpstreamRequestRefused`` before connecting or writing."""

    def __init__(
        self,
        url: str,
        max_connections: int,
        expiry_s: float,
        connect_timeout_s: float,
        peer: str = "upstream",
        max_idle: int | None = None,
        ceiling: int | None = None,
    ) -> None:
        parts = httpx.URL(url)
        self.url = url
        self.peer = peer
        self.host = parts.host
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        default = (parts.scheme == "https" and self.port == 443) or (
            parts.scheme == "http" and self.port == 80
        )
        self.host_header = (netloc if default else f"{netloc}:{self.port}").encode("latin-1")
        self.expiry_s = expiry_s
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[_Exchange] = []
        self.max_connections = max_connections
        self.max_idle = max_idle if max_idle is not None else max(4, min(MAX_IDLE, max_connections // 8))
        # ``ceiling``: adaptive, from max_connections up to it while the upstream keeps up (gate.py)
        self.gate = Gate(max_connections, ceiling, self.lagging if ceiling is not None else None)
        self.busy = 0  # connections (or connects) in use
        self.queued = 0  # requests waiting for one
        self.waits = Waits()  # the requests that waited for a connection, and how long
        self._sweep: asyncio.TimerHandle | None = None
        self._no_descriptor_lines = Throttle()

    def stats(self) -> PoolStats:
        return PoolStats(self.busy, len(self.idle), self.queued, self.gate.limit, *self.waits.figures())

    async def _connect(self, budget: float) -> _Exchange:
        """A new connection, each attempt within ``budget`` seconds (``ConnectTimeout`` past it); a
        connect that fails for want of a descriptor waits and connects again, as long as that takes."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with asyncio.timeout(budget):
                    _, protocol = await loop.create_connection(
                        lambda: _Exchange(self.peer, poll_idle=self.ssl is None),
                        self.host,
                        self.port,
                        ssl=self.ssl,
                    )
                    return protocol
            except TimeoutError as exc:
                raise ConnectTimeout(f"no connection to {self.url} within {budget:g}s") from exc
            except OSError as exc:
                if exc.errno not in _NO_DESCRIPTOR:
                    raise
                self._no_descriptor(exc)
                await asyncio.sleep(_DESCRIPTOR_RETRY_S)  # nothing sent: connecting again is safe

    def _no_descriptor(self, exc: OSError) -> None:
        if self._no_descriptor_lines.tick() is not None:
            log.warning(
                "connecting to the %s %s: [Errno %s] %s with %d connections of this pool in use: "
                "the request waits and connects again (raise the open-file limit, docs/deployment.md "
                "'Large runs')",
                self.peer,
                self.url,
                exc.errno,
                exc.strerror,
                self.busy,
            )

    async def lagging(self) -> bool:
        """Whether the upstream's own loop is behind (``gate.behind``), asked from a thread so that
        this bridge's loop, busy with the calls, does not count."""
        return await asyncio.to_thread(behind, self.host, self.port, self.host_header)

    def _take(self) -> _Exchange | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if now - conn.idle_since < self.expiry_s and conn.quiet():
                return conn
            conn.close()
        return None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One request on a pooled connection (``send``: ``timeout`` bounds the exchange alone, None
        not at all); ``UpstreamRequestRefused`` (nothing sent) for a path or header that fails
        ``check_request``."""
        check_request(path, headers)
        head = [b"POST ", path.encode("latin-1"), b" HTTP/1.1\r\nhost: ", self.host_header]
        for name, value in headers.items():
            head += (b"\r\n", name.encode("latin-1"), b": ", value.encode("latin-1"))
        head += (
            b"\r\nuser-agent: gym-mcp-bridge\r\ncontent-length: ",
            str(len(body)).encode(),
        )
        head.append(b"\r\n\r\n")
        return await self.send(b"".join(head) + body, timeout)

    async def get(self, path: str, timeout: float) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """A GET of ``path`` (checked as ``post`` checks it) on a pooled connection: the upstream's
        ``/openapi.json`` and readiness probes go the way its tool calls go, but a probe waits for a
        free connection no longer than its own ``timeout`` (``ConnectTimeout`` then)."""
        check_request(path, {})
        request = b"".join(
            (
                b"GET ",
                path.encode("latin-1"),
                b" HTTP/1.1\r\nhost: ",
                self.host_header,
                b"\r\nuser-agent: gym-mcp-bridge\r\n\r\n",
            )
        )
        return await self.send(request, timeout, wait_s=timeout)

    async def send(
        self, request: bytes, timeout: float | None, wait_s: float | None = None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Write ``request`` (a whole serialized HTTP/1.1 request with a body, never HEAD) on a pooled
        connection and read its whole answer: (status, headers with lower-cased names, body).
        ``timeout`` bounds the exchange alone (None: no bound): TimeoutError past it. Waiting for a
        free connection counts against nothing and lasts as long as it takes, unless ``wait_s`` bounds
        it (a probe). ``ConnectTimeout`` when connecting took longer than ``connect_timeout_s`` or the
        wait longer than ``wait_s`` (nothing sent), ``OSError`` when connecting failed or the
        connection broke (``ConnectionError``) before the answer ended."""
        loop = asyncio.get_running_loop()
        if self.gate.locked():  # all connections busy: queued until one comes free
            self.queued += 1
            began = loop.time()
            try:
                if wait_s is None:
                    await self.gate.acquire()
                else:
                    async with asyncio.timeout(wait_s):
                        await self.gate.acquire()
            except TimeoutError as exc:
                raise ConnectTimeout(f"no free connection to {self.url} within {wait_s:g}s") from exc
            finally:
                self.queued -= 1
                self.waits.observe(loop.time() - began)
        else:
            await self.gate.acquire()
        self.busy += 1
        try:
            conn = self._take() or await self._connect(self.connect_timeout_s)
            try:
                status, raw_headers, content = await conn.exchange(request, timeout, loop)
            except BaseException:
                conn.close()  # timed out, cancelled or broken mid-exchange: never reuse it
                raise
        finally:
            self.busy -= 1
            self.gate.release()
        kept = max(self.max_idle, self.busy)  # as many idle as are in use: the same load comes back
        if conn.keep_alive and not conn.closed and (len(self.idle) < kept or self.queued):
            conn.idle_since = time.monotonic()
            self.idle.append(conn)
            if self._sweep is None:
                self._sweep = loop.call_later(self.expiry_s, self._expire)
        else:
            conn.close()
        if not self.queued and len(self.idle) > kept:  # the queue and the load are gone: keep the newest
            surplus = len(self.idle) - kept
            for extra in self.idle[:surplus]:
                extra.close()
            del self.idle[:surplus]
        return status, raw_headers, content

    def _expire(self) -> None:
        """Close the connections idle for ``expiry_s`` (the oldest are first in the list); come back
        while any are left."""
        self._sweep = None
        now = time.monotonic()
        expired = 0
        while expired < len(self.idle) and now - self.idle[expired].idle_since >= self.expiry_s:
            self.idle[expired].close()
            expired += 1
        del self.idle[:expired]
        if self.idle:
            wait = self.expiry_s - (now - self.idle[0].idle_since)
            self._sweep = asyncio.get_running_loop().call_later(max(wait, 0.05), self._expire)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in self.idle:
            conn.close()
        self.idle.clear()
        self.gate.close()


class PeerClient(KeepAlivePool):
    """The same keep-alive client, to another replica (forwarding): requests the caller serialized
    are relayed byte for byte with ``send``; errors name the server "owner replica"."""

    def __init__(self, url: str, max_connections: int, expiry_s: float, connect_timeout_s: float) -> None:
        super().__init__(url, max_connections, expiry_s, connect_timeout_s, peer="owner replica")
