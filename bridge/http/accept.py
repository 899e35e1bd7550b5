"""The bridge's accept loop: a connection is accepted only while the process has a descriptor for it,
and every connection it cannot take, or loses while setting it up, is logged with the reason.

uvloop's own server accepts inside libuv, which at EMFILE closes a spare descriptor, accepts every
waiting connection and closes it at once (libuv's "EMFILE trick"): clients see their connection
reset while they write the request, and nothing is logged anywhere. ``BridgeLoop`` (uvloop's loop,
which ``serve`` runs on) serves a listening socket handed to ``create_server`` -- how uvicorn gets the
bridge's socket -- with an ``Acceptor`` instead:

- At most ``limit`` client connections are open at once (``bridge.limits.connection_budget``: the
  open-file limit less the outbound pools at their bounds and a reserve). At the limit accepting
  pauses and further connections wait in the kernel's listen queue (the backlog), as a call past a
  pool's bound waits for a connection; accepting resumes once ``limit / 16`` have closed. Each
  pause is logged when it begins, with the count, and when it ends, with how long it lasted.
- ``accept`` failing for want of a resource (EMFILE, ENFILE, ENOBUFS, ENOMEM) or for any other
  reason is logged with the error and the count of open connections (at most one line a second,
  with the number of failures since the last); accepting pauses for ``RETRY_S`` and the waiting
  connections stay queued. None is accepted only to be closed.
- A connection its client reset before it was accepted (ECONNABORTED) is logged at INFO; one that
  fails while its transport is set up is closed and logged with its error at WARNING.

``client_connections`` reports the open count, the limit and any pause, for ``/metrics`` and
``/healthz``. Any other ``create_server`` (a host and port, TLS) is uvloop's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
import weakref
from collections.abc import Callable
from typing import Any

import uvloop

from bridge.throttle import Throttle

log = logging.getLogger("gym_mcp_bridge.accept")

RETRY_S = 0.1  # pause after a failed accept
BATCH = 128  # connections accepted per wake-up at most, so a flood does not starve the requests
LOG_EVERY_S = 1.0  # repeated accept failures: one line per second at most
RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_acceptors: weakref.WeakSet[Acceptor] = weakref.WeakSet()


class Acceptor:
    """Accepts on one listening socket within a limit; stands in for the ``asyncio.Server`` uvicorn
    keeps (``close``, ``wait_closed``, ``sockets``, ``is_serving``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.BaseProtocol],
        sock: socket.socket,
        limit: int,
    ) -> None:
        self.loop = loop
        self.factory = factory
        self.sock = sock
        self.limit = limit
        self.resume_below = max(1, limit - max(1, limit // 16))
        self.open = 0
        self.paused_since: float | None = None  # at the limit since (monotonic)
        self.failure_lines = Throttle(LOG_EVERY_S)  # accept failures: a line a second at most
        self.failed_total = 0
        self.dropped_total = 0
        self._reading = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._setting_up: set[asyncio.Task[None]] = set()
        _acceptors.add(self)

    # -- the asyncio.Server uvicorn keeps ------------------------------------------------------------

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._closed else (self.sock,)

    def is_serving(self) -> bool:
        return not self._closed

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop

    def close(self) -> None:
        self._closed = True
        self._stop_reading()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    async def wait_closed(self) -> None:
        return None

    # -- accepting ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._start_reading()

    def _start_reading(self) -> None:
        if not self._reading and not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            with contextlib.suppress(OSError, ValueError):  # the socket may be closed already
                self.loop.remove_reader(self.sock.fileno())

    def _accept(self) -> None:
        for _ in range(BATCH):
            if self.open >= self.limit:
                self._pause_at_limit()
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                log.info(
                    "a client reset its connection before it was accepted (ECONNABORTED): nothing to answer"
                )
                continue
            except OSError as exc:
                self._accept_failed(exc)
                return
            self._serve(conn)

    def _pause_at_limit(self) -> None:
        self._stop_reading()
        if self.paused_since is None:
            self.paused_since = time.monotonic()
            log.warning(
                "%d client connections open, the limit this process's open files allow: not accepting "
                "more until %d are open; new connections wait in the listen queue (raise the open-file "
                "limit or add replicas, docs/deployment.md 'Large runs')",
                self.open,
                self.resume_below - 1,
            )

    def _accept_failed(self, exc: OSError) -> None:
        self.failed_total += 1
        failures = self.failure_lines.tick()
        if failures is not None:
            why = "out of a resource" if exc.errno in RESOURCE_ERRORS else "failed"
            log.warning(
                "accept %s: [Errno %s] %s (%d failures since the last line), %d client connections open "
                "(limit %d): connections wait in the listen queue, accepting again in %gs",
                why,
                exc.errno,
                exc.strerror,
                failures,
                self.open,
                self.limit,
                RETRY_S,
            )
        self._stop_reading()
        if self._retry is None:
            self._retry = self.loop.call_later(RETRY_S, self._retry_accept)

    def _retry_accept(self) -> None:
        self._retry = None
        if self.paused_since is None:
            self._start_reading()

    def _serve(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.open += 1
        task = self.loop.create_task(self._set_up(conn))
        self._setting_up.add(task)
        task.add_done_callback(self._setting_up.discard)

    async def _set_up(self, conn: socket.socket) -> None:
        protocol = self.factory()
        ended = False

        def ended_once() -> None:
            nonlocal ended
            if not ended:
                ended = True
                self._ended()

        lost = protocol.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            ended_once()
            lost(exc)

        protocol.connection_lost = connection_lost  # type: ignore[method-assign]
        try:
            await self.loop.connect_accepted_socket(lambda: protocol, conn)
        except Exception as exc:
            self.dropped_total += 1
            log.warning(
                "dropped a client connection while setting it up: %s: %s",
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
            )
            conn.close()
            ended_once()

    def _ended(self) -> None:
        self.open -= 1
        if self.paused_since is not None and self.open < self.resume_below and not self._closed:
            log.info(
                "accepting connections again: %d open (paused %.1fs at the limit %d)",
                self.open,
                time.monotonic() - self.paused_since,
                self.limit,
            )
            self.paused_since = None
            if self._retry is None:
                self._start_reading()


def client_connections() -> dict[str, Any]:
    """The client connections of this process's accept loops: open, the limit, paused at it."""
    acceptors = list(_acceptors)
    return {
        "open": sum(a.open for a in acceptors),
        "limit": sum(a.limit for a in acceptors),
        "accept_paused": any(a.paused_since is not None for a in acceptors),
        "accept_failures": sum(a.failed_total for a in acceptors),
        "dropped": sum(a.dropped_total for a in acceptors),
    }


class BridgeLoop(uvloop.Loop):
    """uvloop's event loop serving a listening socket with an ``Acceptor`` of ``connection_limit``."""

    connection_limit = 1_000_000

    async def create_server(
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: Any = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        **kwargs: Any,
    ) -> Any:
        if sock is None or host is not None or port is not None or ssl is not None or kwargs:
            return await super().create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **kwargs
            )
        sock.setblocking(False)
        sock.listen(backlog)
        acceptor = Acceptor(self, protocol_factory, sock, self.connection_limit)
        acceptor.start()
        return acceptor


def new_event_loop(connection_limit: int) -> BridgeLoop:
    """A ``BridgeLoop`` that keeps at most ``connection_limit`` client connections open."""
    loop = BridgeLoop()
    loop.connection_limit = connection_limit
    return loop
