"""How many requests of one pool hold a connection at once: ``Gate``.

A fixed gate (``Gate(n)``) is a first-come-first-served semaphore of ``n``: a request past it waits
(``acquire``) until one is ``release``d. An adaptive gate (``Gate(floor, ceiling, lagging)``) starts
at ``floor`` and lets the upstream decide how far it goes: while requests wait, it asks
``lagging()`` every ``PROBE_S`` whether the upstream's event loop is behind (a cheap request it
answered slower than ``LAG_S``: ``behind``, run in a thread by ``KeepAlivePool.lagging`` so that
the bridge's own busy loop does not count). An upstream that keeps up -- its calls
sleep on a test suite, a sandbox, a judge -- doubles the limit each time, up to ``ceiling``, so a
step of long calls is all in the upstream within a second or two, as with Gym alone; one whose CPU is
the bottleneck -- millisecond tools, thousands in flight -- keeps the limit where it is, and its
requests queue in the bridge instead of thrashing its loop (a single-process Gym server served
4,096 counter rollouts a third slower with all of them in it than with 256). Once the load is gone
(nothing waits and no more than ``floor`` in use) the limit is back at ``floor``.

Waiting counts against no budget and fails no request unless the caller bounds it (``wait_s``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable

PROBE_S = 0.25  # how often a waiting queue asks the upstream whether it keeps up
LAG_S = 0.1  # a cheap request answered slower than this: the upstream's loop is behind
PROBE_TIMEOUT_S = 2.0


class Gate:
    """At most ``limit`` holders at once, first come first served; ``limit`` between ``floor`` and
    ``ceiling``, grown while ``lagging`` says the upstream keeps up (no ``lagging``: fixed)."""

    def __init__(
        self,
        floor: int,
        ceiling: int | None = None,
        lagging: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.floor = floor
        self.ceiling = max(floor, ceiling if ceiling is not None else floor)
        self.limit = floor
        self.held = 0
        self._lagging = lagging if self.ceiling > floor else None
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._probing: asyncio.Task[None] | None = None

    def locked(self) -> bool:
        """Whether an ``acquire`` now would wait."""
        return self.held >= self.limit or bool(self._waiters)

    async def acquire(self) -> None:
        if not self.locked():
            self.held += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._lagging is not None and self._probing is None and self.limit < self.ceiling:
            self._probing = asyncio.create_task(self._probe())
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # woken, then cancelled: pass the place on
                self.held -= 1
                self._wake()
            else:
                with contextlib.suppress(ValueError):  # _wake may have dropped it already
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.held -= 1
        if not self._waiters and self.held <= self.floor:
            self.limit = self.floor  # the load is gone: the next burst starts from the floor again
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.held < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.held += 1
                waiter.set_result(None)

    async def _probe(self) -> None:
        assert self._lagging is not None
        try:
            while self._waiters and self.limit < self.ceiling:
                await asyncio.sleep(PROBE_S)
                if self._waiters and not await self._lagging():
                    self.limit = min(self.ceiling, self.limit * 2)
                    self._wake()
        finally:
            self._probing = None

    def close(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            self._probing = None


def behind(host: str, port: int, host_header: bytes) -> bool:
    """Whether the upstream at ``host:port`` answers a GET of its ``/openapi.json`` (FastAPI keeps
    it built) later than ``LAG_S``, or not at all: blocking, on a connection of its own (a thread's)."""
    request = b"".join(
        (
            b"GET /openapi.json HTTP/1.1\r\nhost: ",
            host_header,
            b"\r\nuser-agent: gym-mcp-bridge\r\nconnection: close\r\n\r\n",
        )
    )
    began = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(request)
            if not sock.recv(65536):
                return True
            answered = time.perf_counter() - began
            while sock.recv(65536):  # the rest, to the server's close
                pass
    except OSError:  # refused, reset, or no answer within PROBE_TIMEOUT_S
        return True
    return answered > LAG_S
