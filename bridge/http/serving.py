"""The ASGI app uvicorn serves from the moment the port is bound, while the bridge starts behind it.

Liveness must not wait for the upstream: a Gym server may take minutes to boot, and a liveness
probe that fails meanwhile restarts the pod in a loop. So ``serve`` binds, hands uvicorn a
``ServingApp`` at once, and the app starts the bridge in a task of its lifespan: it imports the
bridge's app (the MCP SDK takes about a second), starts or reaches the upstream, loads the tools,
builds the real app and runs that app's lifespan in the same task until shutdown. Until then it answers by itself: ``/healthz``
200 (the process is serving; the body says what is starting), ``/readyz`` 503 with the reason,
anything else 503 (``Retry-After``; a JSON-RPC error on ``/mcp``). Afterwards every request goes
to the real app. A start that fails records its one-line reason and asks uvicorn to stop
(``request_exit``); ``serve`` then exits 2 with that line. This module imports nothing heavy, so
the first ``/healthz`` is answered within milliseconds of the bind.

With ``listen_when_ready`` (for a launcher such as Gym's ``gym env start``, which takes any answer on
the port as ready) the lifespan startup waits for the real app, or fails with the start's reason, so
uvicorn starts accepting connections only when a seed can be served: until then a connection is
refused, and nothing, not even ``/healthz``, answers.

SIGTERM (``on_sigterm``, from ``serve``'s signal handling, before uvicorn's own shutdown begins)
drains the sessions this replica holds (``Bridge.drain_sessions``): ``/readyz`` 503 and seeds 503 at
once, while the port stays open so clients and peers' forwarding reach the sessions until each is
finished or ``shutdown_grace_s`` ends; the sessions left then are named in the log. Only then is
uvicorn asked to stop, and the lifespan's end stops the upstream. Before the bridge serves, or with
``shutdown_grace_s`` 0, SIGTERM stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge import __version__
from bridge.draining import named
from bridge.http.liveness import liveness
from bridge.http.responses import error_body, jsonrpc_error
from bridge.settings import Settings
from bridge.upstream import Upstream, UpstreamStartError, UpstreamTimeout, UpstreamUnavailable

if TYPE_CHECKING:
    from bridge.service import Bridge

log = logging.getLogger("gym_mcp_bridge")

PROBES = ("/healthz", "/readyz")


def _import_app() -> None:
    """Import the real app with the cycle collector paused, then freeze what it made. The import
    makes hundreds of thousands of objects (the SDK's pydantic models) that live as long as the
    process, so a full collection during it, or soon after, rescans them all for nothing (≈ 60 ms
    of a restart, ``benchmarks/footprint.py``)."""
    gc.disable()
    try:
        importlib.import_module("bridge.http.app")
        gc.freeze()
    finally:
        gc.enable()


class ServingApp:
    """Serves probes from the bind on; hands everything to the real app once the bridge started."""

    def __init__(
        self,
        settings: Settings,
        upstream: Upstream,
        keys: list[str],
        bound: tuple[str, int],
        request_exit: Callable[[], None],
        exiting: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.keys = keys
        self.bound = bound
        self.request_exit = request_exit
        self.exiting = exiting
        self.started_at = time.time()
        self.app: ASGIApp | None = None  # the real app, once started
        self.notes: list[tuple[int, str]] = []  # (level, line) logged once it serves, not before a failure
        self.failure: str | None = None  # why the start failed, one line
        self._life: asyncio.Task[None] | None = None
        self.bridge: Bridge | None = None  # once started
        self._drain: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._settled = asyncio.Event()  # the real app serves, or the start failed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif self.app is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await self._answer_starting(scope, send)

    # -- lifespan -------------------------------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._life = asyncio.create_task(self._live())
                if self.settings.listen_when_ready and not await self._settle():
                    await self._stop()
                    # no message: ``serve`` says why in its own one line once uvicorn exits (SystemExit 3)
                    await send({"type": "lifespan.startup.failed", "message": ""})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _settle(self) -> bool:
        """Wait until the real app serves (True) or the start failed or a signal asked to stop (False):
        uvicorn sees its signals only between lifespan steps, so a stop is polled here."""
        while not self._settled.is_set():
            if self.exiting():
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), 0.2)
        return self.failure is None

    async def _live(self) -> None:
        """Start the bridge, then run the real app's lifespan until shutdown, in this one task (the
        MCP session manager's task group must be left by the task that entered it)."""
        booting = asyncio.ensure_future(self.upstream.start())
        try:
            # The MCP SDK takes about a second to import: do it while the upstream boots.
            await asyncio.to_thread(_import_app)
            from bridge.http.app import create_app
            from bridge.service import Bridge

            bridge = self.bridge = Bridge(self.settings, self.upstream, self.keys)
            bridge.bound = self.bound
            bridge.started_at = self.started_at  # uptime counts from the bind, as /healthz did
            await booting
            await bridge.start()
            app, lifespan = create_app(bridge)
            # Everything alive now (imports, the tool list) lives as long as the process: out of the
            # collector's sight, so a full collection under load scans the requests' objects only
            # (a 50-70 ms pause per full collection at 256 sessions before, 3-9 ms after).
            gc.freeze()
            # A young generation of 10,000 objects, not 700: with hundreds of calls in flight their
            # objects outlive a small one and are scanned again and again (3-4 % of the CPU at 64-256
            # sessions); the collector finds about one unreachable object per seven calls.
            gc.set_threshold(10_000, 10, 10)
        except UpstreamStartError as exc:
            self._fail(str(exc))
            return
        except (UpstreamUnavailable, UpstreamTimeout, ValueError) as exc:  # no usable tool list
            self._fail(f"cannot load the tool list from {self.upstream.url}/openapi.json: {exc}")
            return
        finally:
            booting.cancel()
        async with lifespan():  # on exit it stops the upstream
            self.app = app
            self._settled.set()
            for level, note in self.notes:
                log.log(level, "%s", note)
            log.info(
                "gym-mcp-bridge %s serving %s on %s (MCP at %s/mcp)",
                __version__,
                bridge.upstream.server_name,
                f"{self.bound[0]}:{self.bound[1]}",
                bridge.advertise_url,
            )
            await self._stopping.wait()

    # -- drain ------------------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        return self._drain is not None

    def on_sigterm(self) -> None:
        """Drain the sessions held, then ask uvicorn to stop; at once while starting or without a grace."""
        grace = self.settings.shutdown_grace_s
        if self._drain is not None:
            return
        if self.app is None or self.bridge is None or grace <= 0:
            self.request_exit()
            return
        self._drain = asyncio.ensure_future(self._drained(self.bridge, grace))

    def stop_now(self) -> None:
        """SIGINT or a second signal: what uvicorn cancels from now on is refused as its session's loss."""
        if self.bridge is not None:
            self.bridge.drain.stopped = True

    async def _drained(self, bridge: Bridge, grace: float) -> None:
        started = time.monotonic()
        log.info(
            "SIGTERM: draining %d unfinished sessions for at most %gs (shutdown_grace_s): /readyz answers 503 "
            "and new seeds are refused; the sessions held are served to their end, directly and forwarded "
            "by peers; a second SIGTERM or SIGINT stops at once",
            len(bridge.sessions),
            grace,
        )
        try:
            left = await bridge.drain_sessions(grace)
        finally:
            self.request_exit()
        if left:
            log.warning(
                "shutdown grace period of %gs ended with %d sessions unfinished; they are lost (this replica's "
                "next process refuses them as lost): %s",
                grace,
                len(left),
                named(left),
            )
        else:
            log.info("drained in %.1fs: every session held finished; stopping", time.monotonic() - started)

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self._settled.set()
        self.request_exit()

    async def _stop(self) -> None:
        self._stopping.set()
        if self._drain is not None:
            self._drain.cancel()  # a second signal: stop at once
        life = self._life
        if life is not None and not life.done() and self.app is None:
            life.cancel()  # still starting: stop where it is
        if life is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await life
        if self.app is None:
            await self.upstream.stop()

    # -- answers while starting ---------------------------------------------------------------------

    def _reason(self) -> str:
        return self.failure or self.upstream.not_ready_reason or "loading the tool list"

    async def _answer_starting(self, scope: Scope, send: Send) -> None:
        path, retry = scope["path"], []
        if path in ("/healthz", "/health") and scope["method"] in ("GET", "HEAD"):
            status, payload = 200, orjson.dumps(self.healthz())
        elif path == "/readyz" and scope["method"] in ("GET", "HEAD"):
            status, payload = 503, orjson.dumps({"ready": False, "reason": self._reason()})
        elif path == "/mcp":
            status, retry = 503, [(b"retry-after", b"2")]
            payload = jsonrpc_error(status, f"bridge starting: {self._reason()}", kind="not_ready")
        else:
            status, retry = 503, [(b"retry-after", b"2")]
            payload = error_body(status, f"bridge starting: {self._reason()}", "not_ready")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            *retry,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    def healthz(self) -> dict[str, Any]:
        return {**liveness(self.settings, self.upstream, self.bound, self.started_at, 0), "starting": True}
