"""The upstream resources server: its process (managed mode) or its URL (external mode), and the
pooled HTTP client every request to it goes through.

Managed mode spawns ``upstream_boot.py`` under the Gym environment's interpreter (or, when the
server's ``requirements.txt`` asks for more, under its own environment layered on it, built once by
``gym_envs``) in its own process group, reads the port file it writes (the host and port it actually bound), and probes
``/openapi.json`` there until it answers. A child that exits during startup is reported at once
with its exit code and log tail; one that is not ready within ``startup_timeout_s`` is killed and
reported with the seconds spent and the log tail. Once running, ``supervise`` waits on the child:
an unexpected exit bumps ``generation`` (every session built on the old process is lost) and
restarts it with backoff while ``status`` says why it is not ready. ``stop`` sends SIGINT to the
group, then SIGKILL after a grace period.

External mode waits for the URL to answer and probes it for readiness. ``post`` returns each answer
as an ``UpstreamResponse`` (status, raw headers, body) built straight from the parsed bytes, or raises
``UpstreamTimeout`` / ``UpstreamUnavailable`` with a one-line reason. Data flows one way: the
app asks this module for responses and status; this module never calls back into sessions.

Requests are checked before a byte is written (defence in depth: the entries validate tool names
too): the path must be ``/`` plus 1-128 of ``[A-Za-z0-9_.-]`` (the MCP tool-name rule, which
``/seed_session``, ``/verify``, ``/close_session``, ``/aggregate_metrics`` and every ``/<tool>`` fit),
header names must be HTTP tokens other than the framing headers the client writes itself, and header
values must be Latin-1 without control characters (tab allowed). Anything else raises
``UpstreamRequestRefused`` (a ``ValueError``; the caller answers 400), on the pooled and the httpx
path alike.

A pooled connection carries one exchange at a time and goes back to the pool only when that exchange
ended exactly: one complete response and no byte beyond it. Bytes after the response (in the same
read or later), a second or pipelined response, any byte that arrives while the connection sits idle
(a late answer: checked again, with a zero-timeout poll, just before reuse), a parse error, a
timeout, a cancelled call or ``connection: close`` close it instead, so no caller ever reads an
answer meant for another.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import importlib.util
import json
import logging
import os
import re
import select
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httptools
import httpx
import orjson
from opentelemetry.trace import SpanKind

from bridge import gym_envs, tracing
from bridge.settings import Settings

# httpcore runs ``import sniffio`` on every request (to tell asyncio from trio) and falls back to
# asyncio when it is missing; without sniffio installed each of those imports searches sys.path
# again, about a tenth of the bridge's CPU per tool call in a profile. Record the miss once.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

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


class UpstreamRequestRefused(ValueError):
    """A request that must not be sent (bad path or header); nothing was written (the caller's 400)."""


# The MCP tool-name rule; every path the bridge posts (/seed_session, /verify, /<tool>, ...) fits it.
_PATH = re.compile(r"/[A-Za-z0-9_.-]{1,128}")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 field name
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CR, LF, NUL and the rest, tab excepted
_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})  # ours to write
_GOOD_NAMES: set[str] = set()  # header names already checked (a handful in practice; capped)


def check_request(path: str, headers: dict[str, str]) -> None:
    """Raise ``UpstreamRequestRefused`` with a one-line reason (never echoing a header value, which
    may be a session cookie) unless the request line and headers are safe to write."""
    if not _PATH.fullmatch(path):
        raise UpstreamRequestRefused(
            f"refused to send path {path[:80]!r}: it must be '/' plus 1-128 of A-Z a-z 0-9 _ . -"
        )
    for name, value in headers.items():
        if name not in _GOOD_NAMES:
            _check_name(name)
        if not (value.isascii() and value.isprintable()):  # the common case in 0.2 us; else look closer
            _check_value(name, value)


def _check_name(name: str) -> None:
    if not _TOKEN.fullmatch(name):
        raise UpstreamRequestRefused(f"refused to send header name {name[:80]!r}: not an HTTP token")
    if name.lower() in _FRAMING:
        raise UpstreamRequestRefused(f"refused to send header {name!r}: the client writes it itself")
    if len(_GOOD_NAMES) < 256:
        _GOOD_NAMES.add(name)


def _check_value(name: str, value: str) -> None:
    bad = _CONTROL.search(value)
    if bad is not None:
        raise UpstreamRequestRefused(
            f"refused to send header {name!r}: control character {ord(bad.group()):#04x} "
            f"at offset {bad.start()} of its value"
        )
    try:
        value.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise UpstreamRequestRefused(
            f"refused to send header {name!r}: non-Latin-1 character at offset {exc.start} of its value"
        ) from None


@dataclass(slots=True)
class BootInfo:
    host: str
    port: int
    server_name: str
    server_class: str
    gym_version: str
    pid: int
    example_rows: str | None = None  # the environment's data/example.jsonl, when it ships one


@dataclass(slots=True)
class UpstreamResponse:
    """One answer of the upstream: status, raw headers (names lower-cased) and body.

    Built straight from the parsed bytes on the hot path (an ``httpx.Response`` per call cost a
    tenth of the bridge's CPU); ``text`` decodes as httpx does (the charset the content type names,
    else UTF-8, undecodable bytes replaced)."""

    status_code: int
    headers: list[tuple[bytes, bytes]]
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def header(self, name: str) -> str | None:
        key = name.lower().encode("latin-1")
        for found, value in self.headers:
            if found == key:
                return value.decode("latin-1")
        return None

    def header_list(self, name: str) -> list[str]:
        key = name.lower().encode("latin-1")
        return [value.decode("latin-1") for found, value in self.headers if found == key]

    @property
    def content_type(self) -> str | None:
        return self.header("content-type")

    @property
    def text(self) -> str:
        charset = "utf-8"
        content_type = self.content_type
        if content_type and "charset=" in content_type.lower():
            named = content_type.lower().split("charset=", 1)[1].split(";", 1)[0].strip().strip("\"'")
            with contextlib.suppress(LookupError):
                charset = codecs.lookup(named).name
        return self.content.decode(charset, errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        try:
            return orjson.loads(self.content)
        except orjson.JSONDecodeError:  # integers beyond 64 bits are JSON too; NaN and Infinity are not
            return json.loads(self.content, parse_constant=_not_json)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _ExtraResponse(Exception):
    """A second response began on a connection with no request waiting (stops the parser)."""


class _Exchange(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to the upstream; httptools parses the responses.

    ``in_flight`` is true from the write of a request to the end of its response; a byte received
    outside that window, or a second response (or the start of one, or garbage) after the complete
    one in the same read, closes the connection. (Bare CR/LF right after a response in the same read
    is skipped by llhttp, as between any two messages: it cannot form an answer.)"""

    def __init__(self) -> None:
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
        if sock is not None and hasattr(select, "poll"):
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
            self._fail(ConnectionError(f"malformed HTTP response from the upstream: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError("upstream closed the connection before it answered"))

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

    async def exchange(self, request: bytes, timeout: float) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Write one request and wait for its whole response; TimeoutError after ``timeout`` seconds."""
        if self.closed or self.transport is None or self.in_flight:
            raise ConnectionError("upstream closed the connection")
        self._reset()
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = loop.call_later(timeout, self._fail, TimeoutError())
        try:
            self.in_flight = True
            self.transport.write(request)
            await waiter
        finally:
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


class _KeepAlivePool:
    """Pooled keep-alive HTTP/1.1 connections to one ``http://host:port`` upstream, for the hot path.

    The upstream is a local Gym server speaking plain HTTP/1.1, so a request is one write of the
    serialized request and one httptools-parsed response, without httpx's per-request machinery
    (its transport, pool bookkeeping and stream wrappers were over half of the bridge's CPU per tool
    call in a profile). Idle connections are reused newest first and dropped after ``expiry_s`` or
    as soon as the upstream closes them or sends anything; a connection whose exchange did not end
    exactly (timed out, cancelled, failed, extra bytes) is never reused. ``post`` refuses unsafe
    requests with ``UpstreamRequestRefused`` before connecting or writing."""

    def __init__(self, url: str, max_connections: int, expiry_s: float, connect_timeout_s: float) -> None:
        parts = httpx.URL(url)
        self.url = url
        self.host = parts.host
        self.port = parts.port or 80
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = f"{netloc}:{self.port}".encode("latin-1")
        self.expiry_s = expiry_s
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[_Exchange] = []
        self.gate = asyncio.Semaphore(max_connections)

    async def _connect(self, timeout: float) -> _Exchange:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(min(timeout, self.connect_timeout_s)):
            _, protocol = await loop.create_connection(_Exchange, self.host, self.port)
        return protocol

    def _take(self) -> _Exchange | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if now - conn.idle_since < self.expiry_s and conn.quiet():
                return conn
            conn.close()
        return None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], timeout: float
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One request on a pooled connection; TimeoutError when the whole of it (waiting for a free
        connection, connecting, the exchange) takes longer than ``timeout`` seconds;
        ``UpstreamRequestRefused`` (nothing sent) for a path or header that fails ``check_request``."""
        check_request(path, headers)
        head = [b"POST ", path.encode("latin-1"), b" HTTP/1.1\r\nhost: ", self.host_header]
        for name, value in headers.items():
            head += (b"\r\n", name.encode("latin-1"), b": ", value.encode("latin-1"))
        head += (
            b"\r\naccept: */*\r\nuser-agent: gym-mcp-bridge\r\ncontent-length: ",
            str(len(body)).encode(),
        )
        head.append(b"\r\n\r\n")
        request = b"".join(head) + body
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.gate.locked():  # all connections busy: the wait counts against the budget
            async with asyncio.timeout(timeout):
                await self.gate.acquire()
        else:
            await self.gate.acquire()
        try:
            conn = self._take() or await self._connect(deadline - loop.time())
            try:
                status, raw_headers, content = await conn.exchange(request, deadline - loop.time())
            except BaseException:
                conn.close()  # timed out, cancelled or broken mid-exchange: never reuse it
                raise
        finally:
            self.gate.release()
        if conn.keep_alive and not conn.closed:
            conn.idle_since = time.monotonic()
            self.idle.append(conn)
        else:
            conn.close()
        return status, raw_headers, content

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


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
        self._env: gym_envs.GymEnv | None = None  # the server's interpreter and directory (managed)
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False
        self._workdir = Path(tempfile.mkdtemp(prefix="gym-mcp-bridge-"))
        self.client = httpx.AsyncClient(
            # Never keep cookies in the shared client: each request carries exactly its session's cookie.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            timeout=httpx.Timeout(settings.tool_timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=256, keepalive_expiry=60),
        )
        # Tool calls and other POSTs to a plain-http upstream go through this lean keep-alive pool
        # (see _KeepAlivePool); httpx serves everything else (https, probes, /openapi.json).
        self._pool: _KeepAlivePool | None = None

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
            env=self._env.child_env({**os.environ, "PYTHONUNBUFFERED": "1"}),
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
                    example_rows=info.get("example_rows"),
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
        if self._pool is not None:
            self._pool.close()
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
    ) -> UpstreamResponse:
        """POST ``body`` to ``path``: the answer, or ``UpstreamTimeout`` / ``UpstreamUnavailable``;
        ``UpstreamRequestRefused`` (nothing sent; answer 400) for a path or header that fails
        ``check_request`` (both the pool and the httpx path check). With tracing on, a client span
        whose ``traceparent`` goes upstream."""
        if not tracing.ENABLED:
            return await self._post(path, body, headers, timeout)
        with tracing.span(f"upstream POST {path}", SpanKind.CLIENT, **{"url.path": path}) as current:
            response = await self._post(path, body, tracing.inject(headers), timeout)
            if current is not None:
                current.set_attribute("http.response.status_code", response.status_code)
            return response

    async def _post(
        self, path: str, body: bytes, headers: dict[str, str], timeout: float | None = None
    ) -> UpstreamResponse:
        if self.url is None:
            raise UpstreamUnavailable(self.not_ready_reason or "upstream not started")
        budget = timeout if timeout is not None else self.settings.tool_timeout_s
        if not self.url.startswith("http://"):
            return await self._post_httpx(path, body, headers, budget)
        pool = self._pool
        if pool is None or pool.url != self.url:
            if pool is not None:
                pool.close()
            # Reuse an idle connection only well inside the server's keep-alive window, so the
            # upstream never closes one under a request we just wrote: ours runs uvicorn with 75 s;
            # an external server may use uvicorn's default 5 s.
            expiry = 60.0 if self.mode == "managed" else 4.0
            pool = self._pool = _KeepAlivePool(
                self.url, max_connections=512, expiry_s=expiry, connect_timeout_s=5.0
            )
        try:
            status, raw_headers, content = await pool.post(path, body, headers, budget)
        except TimeoutError as exc:
            raise UpstreamTimeout(f"upstream did not answer {path} within {budget:g}s") from exc
        except OSError as exc:
            reason = await self.failure_cause(exc)  # names the child's death when it died under the call
            raise UpstreamUnavailable(f"upstream failed on {path}: {reason}") from exc
        return UpstreamResponse(status, raw_headers, content)

    async def _post_httpx(
        self, path: str, body: bytes, headers: dict[str, str], budget: float
    ) -> UpstreamResponse:
        assert self.url is not None
        check_request(path, headers)  # also here: this path must refuse what the pool refuses
        try:
            response = await self.client.post(
                f"{self.url}{path}", content=body, headers=headers, timeout=budget
            )
            return UpstreamResponse(
                response.status_code, [(k.lower(), v) for k, v in response.headers.raw], response.content
            )
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"upstream did not answer {path} within {budget:g}s") from exc
        except httpx.HTTPError as exc:
            reason = await self.failure_cause(exc)  # names the child's death when it died under the call
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
