"""The upstream resources server: its process (managed mode) or its URL (external mode), and the
pooled HTTP client every request to it goes through.

Managed mode spawns ``upstream_boot.py`` under the Gym environment's interpreter in its own process
group, reads the port file it writes (the host and port it actually bound), and probes
``/openapi.json`` there until it answers. A child that exits during startup is reported at once
with its exit code and log tail; one that is not ready within ``startup_timeout_s`` is killed and
reported with the seconds spent and the log tail. Once running, ``supervise`` waits on the child:
an unexpected exit bumps ``generation`` (every session built on the old process is lost) and
restarts it with backoff while ``status`` says why it is not ready. ``stop`` sends SIGINT to the
group, then SIGKILL after a grace period.

External mode waits for the URL to answer and probes it for readiness. Data flows one way: the
app asks this module for responses and status; this module never calls back into sessions.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import tempfile
import time
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httpx

from bridge.settings import Settings

log = logging.getLogger("gym_mcp_bridge.upstream")

BOOT_SCRIPT = Path(__file__).with_name("upstream_boot.py")
LOG_TAIL_LINES = 40
STOP_GRACE_S = 5.0
_POLL_S = 0.05
_DEATH_WAIT_S = 0.3  # how long a failed request waits to learn whether the child died


class UpstreamStartError(Exception):
    """The upstream could not be started or reached; str(exc) says what and how to fix it."""


class UpstreamUnavailable(Exception):
    """The upstream could not be reached or failed mid-request (502)."""


class UpstreamTimeout(Exception):
    """The upstream did not answer within the budget (504)."""


@dataclass(slots=True)
class BootInfo:
    host: str
    port: int
    server_name: str
    server_class: str
    gym_version: str
    pid: int


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Upstream:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.mode = "managed" if settings.managed else "external"
        self.url: str | None = settings.upstream_url
        self.generation = 0
        self.restarts = 0
        self.ready = False
        self.not_ready_reason = "upstream starting"
        self.started_at = time.monotonic()
        self.boot: BootInfo | None = None
        self.exit_code: int | None = None
        self.log_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False
        self._workdir = Path(tempfile.mkdtemp(prefix="gym-mcp-bridge-"))
        self.client = httpx.AsyncClient(
            # Never keep cookies in the shared client: each request carries exactly its session's cookie.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            timeout=httpx.Timeout(settings.tool_timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=256, keepalive_expiry=60),
        )

    # -- identity -------------------------------------------------------------------------------

    @property
    def spec(self) -> str:
        return self.settings.upstream_url or self.settings.resources_server

    @property
    def server_name(self) -> str:
        if self.settings.server_name:
            return self.settings.server_name
        if self.boot is not None:
            return self.boot.server_name
        return "gym"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

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
        self.started_at = time.monotonic()
        if self.mode == "external":
            await self._wait_external()
        else:
            await self._spawn()
        self.ready = True
        self.not_ready_reason = ""

    async def _wait_external(self) -> None:
        budget = self.settings.startup_timeout_s
        deadline = time.monotonic() + budget
        last_error = "no answer"
        while time.monotonic() < deadline:
            try:
                response = await self.client.get(f"{self.url}/openapi.json", timeout=2.0)
                if response.status_code == 200:
                    return
                last_error = f"HTTP {response.status_code} from /openapi.json"
            except httpx.HTTPError as exc:
                last_error = _describe(exc)
            self.not_ready_reason = f"waiting for upstream {self.url}: {last_error}"
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
        port_file = self._workdir / f"port-{self.generation}.json"
        port_file.unlink(missing_ok=True)
        self.log_tail.clear()
        self.exit_code = None
        self.boot = None
        self._proc = await asyncio.create_subprocess_exec(
            str(python),
            str(BOOT_SCRIPT),
            "--server",
            self.settings.resources_server,
            "--host",
            self.settings.upstream_host,
            "--port",
            str(self.settings.upstream_port),
            "--port-file",
            str(port_file),
            "--parent-pid",
            str(os.getpid()),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = asyncio.create_task(self._read_log(self._proc))
        budget = self.settings.startup_timeout_s
        started = time.monotonic()
        name = self.settings.resources_server
        while True:
            spent = time.monotonic() - started
            if self._proc.returncode is not None:
                await self._drain_log()
                self.exit_code = self._proc.returncode
                raise UpstreamStartError(
                    f"upstream {name} exited with code {self.exit_code} after {spent:.1f}s of startup"
                    f"{self._tail_text()}"
                )
            if spent > budget:
                tail = self._tail_text()  # before the kill adds the child's interrupt traceback
                await self._kill_group()
                raise UpstreamStartError(
                    f"upstream {name} not ready after {spent:.1f}s of its {budget:g}s startup budget "
                    f"(startup_timeout_s){tail}"
                )
            if self.boot is None and port_file.is_file():
                info = json.loads(port_file.read_text())
                self.boot = BootInfo(
                    host=info["host"],
                    port=int(info["port"]),
                    server_name=info["server_name"],
                    server_class=info["class"],
                    gym_version=info["gym_version"],
                    pid=int(info["pid"]),
                )
                self.url = _url(self.boot.host, self.boot.port)
            if self.url is not None and self.boot is not None:
                with contextlib.suppress(httpx.HTTPError):
                    probe = await self.client.get(f"{self.url}/openapi.json", timeout=1.0)
                    if probe.status_code == 200:
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
                f"upstream {name} starting: {spent:.1f}s of its {budget:g}s startup budget{self._tail_text()}"
            )
            await asyncio.sleep(_POLL_S)

    async def supervise(self) -> None:
        """Managed mode: restart the child when it dies unexpectedly, with backoff."""
        backoff = 0.5
        while self._proc is not None and not self._stopping:
            code = await self._proc.wait()
            if self._stopping:
                return
            await self._drain_log()
            self.exit_code = code
            self.ready = False
            self.generation += 1
            died = f"upstream {self.settings.resources_server} exited with code {code} ({_exit_text(code)})"
            log.error("%s; every session it held is lost%s", died, self._tail_text())
            if not self.settings.restart_upstream:
                self.not_ready_reason = f"{died} (restart_upstream is off){self._tail_text()}"
                return
            while not self._stopping:
                self.not_ready_reason = f"{died}; restarting (attempt {self.restarts + 1}){self._tail_text()}"
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
            response = await self.client.get(f"{self.url}/openapi.json", timeout=2.0)
        except httpx.HTTPError as exc:
            return f"upstream {self.url} unreachable: {_describe(exc)}"
        if response.status_code != 200:
            return f"upstream {self.url} answered HTTP {response.status_code} to /openapi.json"
        return None

    async def failure_cause(self, exc: BaseException) -> str:
        """Why a request to the upstream failed; names the process's death when the managed child
        died under the request (its connection drops a moment before the exit is reaped)."""
        proc = self._proc
        if proc is not None and not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), _DEATH_WAIT_S)
            if proc.returncode is not None:
                return (
                    f"the upstream process {self.settings.resources_server} (pid {proc.pid}) died "
                    f"({_exit_text(proc.returncode)}) during the call; every session it held is lost"
                )
        return self.not_ready_reason if not self.ready else _describe(exc)

    async def stop(self) -> None:
        self._stopping = True
        self.ready = False
        self.not_ready_reason = "bridge shutting down"
        await self._kill_group()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self.client.aclose()
        for leftover in self._workdir.glob("*"):
            leftover.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._workdir.rmdir()

    async def _kill_group(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            log.warning(
                "upstream did not stop within %.0fs of SIGINT; killing its process group", STOP_GRACE_S
            )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # also reaps grandchildren left in the group
        await proc.wait()

    # -- log ------------------------------------------------------------------------------------

    async def _read_log(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.log_tail.append(line)
                log.debug("[upstream] %s", line)

    async def _drain_log(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), 1.0)

    def _tail_text(self, lines: int = 10) -> str:
        tail = list(self.log_tail)[-lines:]
        if not tail:
            return ""
        return "; last log lines:\n  " + "\n  ".join(tail)

    # -- requests -------------------------------------------------------------------------------

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], timeout: float | None = None
    ) -> httpx.Response:
        if self.url is None:
            raise UpstreamUnavailable(self.not_ready_reason or "upstream not started")
        try:
            return await self.client.post(
                f"{self.url}{path}",
                content=body,
                headers=headers,
                timeout=timeout if timeout is not None else self.settings.tool_timeout_s,
            )
        except httpx.TimeoutException as exc:
            budget = timeout if timeout is not None else self.settings.tool_timeout_s
            raise UpstreamTimeout(f"upstream did not answer {path} within {budget:g}s") from exc
        except httpx.HTTPError as exc:
            reason = await self.failure_cause(exc)
            raise UpstreamUnavailable(f"upstream failed on {path}: {reason}") from exc

    async def get_json(self, path: str) -> Any:
        if self.url is None:
            raise UpstreamUnavailable("upstream not started")
        response = await self.client.get(f"{self.url}{path}", timeout=10.0)
        response.raise_for_status()
        return response.json()


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
