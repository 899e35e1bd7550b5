"""How many requests of one pool hold a connection at once: ``Gate``.

A fixed gate (``Gate(n)``) is a first-come-first-served semaphore of ``n``: a request past it waits
(``acquire``) until one is ``release``d. An adaptive gate (``Gate(floor, ceiling, lagging)``) starts
at ``floor`` and lets the upstream decide how far it goes: while requests wait, it asks
``lagging()`` every ``PROBE_S`` whether the upstream's event loop is behind (a cheap request it
answered slower than ``LAG_S``: ``KeepAlivePool.lagging``). An upstream that keeps up -- its calls
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
from collections.abc import Awaitable, Callable

PROBE_S = 0.25  # how often a waiting queue asks the upstream whether it keeps up
LAG_S = 0.05  # a cheap request answered slower than this: the upstream's loop is behind


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
