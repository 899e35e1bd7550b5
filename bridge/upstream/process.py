"""The upstream resources server's lifecycle: its process (managed mode) or its URL (external mode),
and ``post``, ``get_json`` and the probes, every one through the one client (``client``).

Every request -- the tool calls, seeds and verifies (``post``), the tool list (``get_json``), the
readiness probes and the startup waits -- goes through ``_send``, that is ``UpstreamClient.send``.
A failure comes back as a ``TimeoutError`` or an ``OSError``, which this module turns into
``UpstreamTimeout`` / ``UpstreamUnavailable`` or a not-ready reason.

Managed mode spawns ``boot.py`` (a ``child.Child``) under the Gym environment's interpreter (or,
when the server's ``requirements.txt`` asks for more, under its own environment layered on it, built
once by ``envs``) in its own process group, reads the port file it writes (the host and port it
actually bound), and probes ``/openapi.json`` there until it answers. A child that exits during startup is reported at once
with its exit code and log tail; one that is not ready within ``startup_timeout_s`` is killed and
reported with the seconds spent and the log tail. Once running, ``supervise`` waits on the child:
an unexpected exit bumps ``generation`` (every session built on the old process is lost) and
restarts it with backoff while ``status`` says why it is not ready. ``stop`` sends SIGINT to the
group, then SIGKILL after a grace period.

External mode waits for the URL to answer and probes it for readiness. ``post`` returns each answer
as an ``UpstreamResponse`` (status, raw headers, body) built straight from the parsed bytes, or raises
``UpstreamTimeout`` / ``UpstreamUnavailable`` with a one-line reason. Data flows one way: the
app asks this module for responses and status; this module never calls back into sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from opentelemetry.trace import SpanKind

from bridge import rollouts, tracing
from bridge.settings import Settings
from bridge.throttle import Throttle
from bridge.upstream import envs as gym_envs
from bridge.upstream.child import BootInfo, Child, exit_text
from bridge.upstream.client import UpstreamClient
from bridge.upstream.response import UpstreamResponse
from bridge.upstream.transport import ConnectTimeout, PoolStats, UpstreamTimeout, UpstreamUnavailable

log = logging.getLogger("gym_mcp_bridge.upstream")

_POLL_S = 0.05
_DEATH_WAIT_S = 0.3  # how long a failed request waits to learn whether the child died
_WAITING_LINE_S = 10.0  # an external upstream that does not answer yet: a log line this often


class UpstreamStartError(Exception):
    """The upstream could not be started or reached; str(exc) says what and how to fix it."""


# An upstream request's time limit: the setting holding the operator's limit (named in the refusal;
# unset: none), seconds (the bridge's own small calls), or None (none).
TimeLimit = Literal["tool_timeout_s", "verify_timeout_s"] | float | None


class Upstream:
    """The Gym resources server behind the bridge: started and supervised here (managed mode) or
    reached at its URL (external), and ``post``, the one way a request gets to it. ``generation``
    counts its restarts: a session seeded on an earlier generation is lost."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.mode = "managed" if settings.managed else "external"
        self.url: str | None = settings.upstream_url
        self.generation = 0
        self.restarts = 0
        self.ready = False
        self.not_ready_reason = "upstream starting"
        self.boot: BootInfo | None = None
        self.exit_code: int | None = None
        self._child: Child | None = None
        self._env: gym_envs.GymEnv | None = None  # the server's interpreter and directory (managed)
        self._stopping = False
        self._workdir = Path(tempfile.mkdtemp(prefix="gym-mcp-bridge-"))
        # Every request to the upstream goes through this one client (see ``client.UpstreamClient``).
        self.requests = UpstreamClient(settings, self.mode, self.url)
        self.client = self.requests.httpx  # the https upstream's
        self._failure_lines = Throttle()  # requests that failed (502): a line a second at most

    # -- identity -------------------------------------------------------------------------------

    @property
    def server_name(self) -> str:
        if self.settings.server_name:
            return self.settings.server_name
        if self.boot is not None:
            return self.boot.server_name
        return "gym"

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.pid if child is not None and child.returncode is None else None

    def pool_stats(self) -> PoolStats:
        """The connections to the upstream now: in use, idle, requests queued for one, the bound."""
        return self.requests.stats()

    def status(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "url": self.url,
            "bound_host": self.boot.host if self.boot else None,
            "ready": self.ready,
            "pid": self.pid,
            "server_name": self.server_name,
            "server_class": self.boot.server_class if self.boot else None,
            "gym_version": self.boot.gym_version if self.boot else None,
            "generation": self.generation,
            "restarts": self.restarts,
        }

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.mode == "external":
            await self._wait_external()
        else:
            await self._spawn()
        self.ready = True
        self.not_ready_reason = ""

    async def _wait_external(self) -> None:
        budget = self.settings.startup_timeout_s
        started = time.monotonic()
        deadline = started + budget
        last_error = "no answer"
        lines = Throttle(_WAITING_LINE_S)  # the first failure at once, then one line per interval
        while time.monotonic() < deadline:
            try:
                response = await self._send("GET", "/openapi.json", b"", {}, 2.0)
                if response.status_code == 200:
                    if last_error != "no answer":  # a wait was logged: say that it ended
                        log.info("upstream %s answers after %.1fs", self.url, time.monotonic() - started)
                    return
                last_error = f"HTTP {response.status_code} from /openapi.json"
            except OSError as exc:  # TimeoutError too
                last_error = _describe(exc)
            self.not_ready_reason = f"waiting for upstream {self.url}: {last_error}"
            if lines.tick() is not None:
                log.warning(
                    "waiting for upstream %s: %s (%.0fs of its %gs startup budget; check --upstream-url / "
                    "GYM_MCP_BRIDGE_UPSTREAM_URL)",
                    self.url,
                    last_error,
                    time.monotonic() - started,
                    budget,
                )
            await asyncio.sleep(0.25)
        raise UpstreamStartError(
            f"upstream {self.url} did not answer within {budget:g}s ({last_error}); "
            "check --upstream-url / GYM_MCP_BRIDGE_UPSTREAM_URL"
        )

    async def _spawn(self) -> None:
        python = self.settings.resolved_gym_python()
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise UpstreamStartError(
                f"Gym environment interpreter not found at {python}; run 'make setup' or pass "
                "--gym-python / GYM_MCP_BRIDGE_GYM_PYTHON"
            )
        if self._env is None:  # once per process: a restart reuses the environment
            self.not_ready_reason = f"preparing the environment of {self.settings.resources_server}"
            try:
                self._env = await gym_envs.ensure(
                    self.settings.resources_server, python, self.settings.gym_envs_dir
                )
            except gym_envs.EnvBuildError as exc:
                raise UpstreamStartError(f"upstream {self.settings.resources_server}: {exc}") from exc
        python = self._env.python
        port_file = self._workdir / f"port-{self.generation}.json"
        port_file.unlink(missing_ok=True)
        self.exit_code = None
        self.boot = None
        if self._child is not None:
            await self._child.close()
        args = ["--server", self.settings.resources_server, "--host", self.settings.upstream_host]
        args += ["--port", str(self.settings.upstream_port), "--port-file", str(port_file)]
        args += ["--parent-pid", str(os.getpid())]
        env = self._env.child_env({**os.environ, "PYTHONUNBUFFERED": "1"})
        child = self._child = await Child.spawn(python, args, env)
        budget = self.settings.startup_timeout_s
        started = time.monotonic()
        name = self.settings.resources_server
        while True:
            spent = time.monotonic() - started
            if child.returncode is not None:
                await child.drain_log()
                self.exit_code = child.returncode
                raise UpstreamStartError(
                    f"upstream {name} exited with code {self.exit_code} after {spent:.1f}s of startup"
                    f"{child.tail_text()}"
                )
            if spent > budget:
                tail = child.tail_text()  # before the kill adds the child's interrupt traceback
                await child.kill_group()
                raise UpstreamStartError(
                    f"upstream {name} not ready after {spent:.1f}s of its {budget:g}s startup budget "
                    f"(startup_timeout_s){tail}"
                )
            if self.boot is None:
                self.boot = BootInfo.read(port_file)
                if self.boot is not None:
                    self.url = self.boot.url
            if self.url is not None and self.boot is not None:
                with contextlib.suppress(OSError):  # TimeoutError too
                    probe = await self._send("GET", "/openapi.json", b"", {}, 1.0)
                    if probe.status_code == 200:
                        child.relay_log()
                        log.info(
                            "upstream %s (%s, nemo-gym %s) ready on %s after %.1fs",
                            self.boot.server_name,
                            self.boot.server_class,
                            self.boot.gym_version,
                            self.url,
                            spent,
                        )
                        return
            self.not_ready_reason = (
                f"upstream {name} starting: {spent:.1f}s of its {budget:g}s startup budget{child.tail_text()}"
            )
            await asyncio.sleep(_POLL_S)

    async def supervise(self) -> None:
        """Managed mode: restart the child when it dies unexpectedly, with backoff."""
        backoff = 0.5
        while self._child is not None and not self._stopping:
            child = self._child
            code = await child.wait()
            if self._stopping:
                return
            died = f"upstream {self.settings.resources_server} exited with code {code} ({exit_text(code)})"
            self.exit_code = code
            self.ready = False
            self.not_ready_reason = died
            self.generation += 1
            await child.drain_log()
            log.error("%s; every session it held is lost%s", died, child.tail_text())
            if not self.settings.restart_upstream:
                self.not_ready_reason = f"{died} (restart_upstream is off){child.tail_text()}"
                return
            while not self._stopping:
                tail = self._child.tail_text() if self._child is not None else ""  # the last attempt's
                self.not_ready_reason = f"{died}; restarting (attempt {self.restarts + 1}){tail}"
                await asyncio.sleep(backoff)
                try:
                    await self._spawn()
                except UpstreamStartError as exc:
                    self.generation += 1
                    self.not_ready_reason = f"{died}; restart failed: {exc}"
                    log.error("upstream restart failed: %s", exc)
                    backoff = min(backoff * 2, 30.0)
                    continue
                self.restarts += 1
                self.ready = True
                self.not_ready_reason = ""
                backoff = 0.5
                break

    async def probe(self) -> str | None:
        """None when the upstream answers now, else why not (external mode's readiness)."""
        if self.url is None:
            return self.not_ready_reason
        try:
            response = await self._send("GET", "/openapi.json", b"", {}, 2.0)
        except OSError as exc:  # TimeoutError too
            code = await self._death(self._child)
            if code is not None:  # a managed child's socket closes a moment before its exit is reaped
                return (
                    f"upstream {self.settings.resources_server} exited with code {code} ({exit_text(code)})"
                )
            return f"upstream {self.url} unreachable: {_describe(exc)}"
        if response.status_code != 200:
            return f"upstream {self.url} answered HTTP {response.status_code} to /openapi.json"
        return None

    async def failure_cause(self, exc: BaseException) -> str:
        """Why a request to the upstream failed; names the process's death when the managed child
        died under the request (its connection drops a moment before the exit is reaped)."""
        child = self._child
        code = await self._death(child)
        if child is not None and code is not None:
            return (
                f"the upstream process {self.settings.resources_server} (pid {child.pid}) died "
                f"({exit_text(code)}) during the call; every session it held is lost"
            )
        return self.not_ready_reason if not self.ready else _describe(exc)

    async def _death(self, child: Child | None) -> int | None:
        """The managed child's exit code when it has died, else None; None too while stopping,
        when its death is expected."""
        if child is None or self._stopping:
            return None
        return await child.death(_DEATH_WAIT_S)

    async def stop(self) -> None:
        self._stopping = True
        self.ready = False
        self.not_ready_reason = "bridge shutting down"
        if self._child is not None:
            await self._child.kill_group()
            await self._child.close()
        await self.requests.aclose()
        for leftover in self._workdir.glob("*"):
            leftover.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._workdir.rmdir()

    # -- requests -------------------------------------------------------------------------------

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], timeout: TimeLimit = "tool_timeout_s"
    ) -> UpstreamResponse:
        """POST ``body`` to ``path``: the answer, or ``UpstreamTimeout`` / ``UpstreamUnavailable``;
        ``UpstreamRequestRefused`` (nothing sent; answer 400) for a path or header that fails
        ``check_request`` (both the pool and the httpx path check). ``timeout`` bounds the upstream's
        time alone, never the wait for a connection: the name of the setting that holds the
        operator's limit (``tool_timeout_s``, ``verify_timeout_s``; unset: no limit; named in the
        refusal), or seconds (the bridge's own small calls), or None (no limit). With tracing on, a
        client span whose ``traceparent`` goes upstream."""
        if not tracing.ENABLED:
            return await self._post(path, body, headers, timeout)
        shown = rollouts.shown_path(path)  # a long rollout id as its label
        with tracing.span(f"upstream POST {shown}", SpanKind.CLIENT, **{"url.path": shown}) as current:
            response = await self._post(path, body, tracing.inject(headers), timeout)
            if current is not None:
                current.set_attribute("http.response.status_code", response.status_code)
            return response

    async def _post(
        self,
        path: str,
        body: bytes,
        headers: dict[str, str],
        timeout: TimeLimit = "tool_timeout_s",
        via_httpx: bool = False,
    ) -> UpstreamResponse:
        budget = getattr(self.settings, timeout) if isinstance(timeout, str) else timeout
        try:
            return await self._send("POST", path, body, headers, budget, via_httpx)
        except ConnectTimeout as exc:  # nothing sent: the upstream is not reachable (502)
            raise self._unavailable(f"upstream failed on {rollouts.shown_path(path)}: {exc}") from exc
        except TimeoutError as exc:
            named = f" ({timeout})" if isinstance(timeout, str) else ""
            within = f"within {budget:g}s{named}" if budget is not None else f"in time: {_describe(exc)}"
            raise UpstreamTimeout(f"upstream did not answer {rollouts.shown_path(path)} {within}") from exc
        except OSError as exc:
            reason = await self.failure_cause(exc)  # names the child's death when it died under the call
            raise self._unavailable(f"upstream failed on {rollouts.shown_path(path)}: {reason}") from exc

    async def _post_httpx(
        self, path: str, body: bytes, headers: dict[str, str], budget: TimeLimit
    ) -> UpstreamResponse:
        """``post`` as an ``https://`` upstream gets it (over httpx), whatever this one's URL."""
        return await self._post(path, body, headers, budget, via_httpx=True)

    async def _send(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        budget: float | None,
        via_httpx: bool = False,
    ) -> UpstreamResponse:
        """The one way a request reaches the upstream (``UpstreamClient.send``): TimeoutError or
        ``OSError`` on failure, ``UpstreamRequestRefused`` when nothing was sent."""
        if self.url is None:
            raise UpstreamUnavailable(self.not_ready_reason or "upstream not started")
        return await self.requests.send(self.url, method, path, body, headers, budget, via_httpx)

    def _unavailable(self, message: str) -> UpstreamUnavailable:
        """The error of a request the upstream failed (the caller's 502), logged: at most one line a
        second, with the number of failures since the last one."""
        failures = self._failure_lines.tick()
        if failures is not None:
            log.warning("%s (%d such failures since the last line)", message, failures)
        return UpstreamUnavailable(message)

    async def get_json(self, path: str) -> Any:
        """The upstream's JSON document at ``path`` (its ``/openapi.json``): ``UpstreamUnavailable``
        when it answers anything but 2xx or cannot be reached, ``UpstreamTimeout`` after 10 s,
        ``ValueError`` when the answer is no JSON."""
        try:
            response = await self._send("GET", path, b"", {}, 10.0)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"upstream did not answer GET {rollouts.shown_path(path)} within 10s"
            ) from exc
        except OSError as exc:
            raise UpstreamUnavailable(f"GET {rollouts.shown_path(path)}: {_describe(exc)}") from exc
        if not 200 <= response.status_code < 300:
            raise UpstreamUnavailable(f"HTTP {response.status_code} from GET {rollouts.shown_path(path)}")
        return json.loads(response.content)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
