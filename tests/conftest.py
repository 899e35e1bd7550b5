"""Shared fixtures: real bridges (``gym-mcp-bridge serve`` in a child process, with a real nemo-gym
resources server under it), real upstreams, and the official MCP SDK client."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from benchmarks.procs import free_port, wait_for_boot

ROOT = Path(__file__).resolve().parent.parent
GYM_PYTHON = ROOT / ".gym-env" / "bin" / "python"
GYM_SITE = (
    next((ROOT / ".gym-env" / "lib").glob("python3.*/site-packages"), None)
    if (ROOT / ".gym-env").exists()
    else None
)
BRIDGE = [sys.executable, "-m", "bridge"]
BOOT = ROOT / "bridge" / "upstream" / "boot.py"
SECRET = "test-secret-0123456789abcdef0123456789"
HEADER = "X-NeMo-Gym-Session-Token"


def gym_data(env: str, name: str = "example.jsonl") -> list[dict[str, Any]]:
    assert GYM_SITE is not None, "the Gym environment is missing: run 'make setup'"
    path = GYM_SITE / "resources_servers" / env / "data" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def soft_open_files(soft: int, hard: int | None = None) -> None:
    """Set this process's ``RLIMIT_NOFILE`` (in a child, before it runs: ``preexec_fn``); the hard
    limit unchanged unless given."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1] if hard is None else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(FileNotFoundError):
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        if state == "Z":
            return False
    return True


@dataclass
class BridgeProcess:
    """``gym-mcp-bridge serve`` running in a child process."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    open_files: int | None = None  # start with this soft RLIMIT_NOFILE
    hard_open_files: int | None = None  # and this hard one (default: unchanged)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, log_dir: Path, wait_ready: bool = True, timeout: float = 120) -> BridgeProcess:
        self.port = self.port or free_port(self.host)
        self.log_path = log_dir / f"bridge-{self.port}.log"
        env = {**os.environ, "GYM_MCP_BRIDGE_SECRET": SECRET, **self.env}
        self.proc = subprocess.Popen(
            [*BRIDGE, "serve", "--host", self.host, "--port", str(self.port), *self.args],
            cwd=ROOT,
            env=env,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=None
            if self.open_files is None
            else functools.partial(soft_open_files, self.open_files, self.hard_open_files),
        )
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"bridge exited with {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"bridge not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def health(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/healthz", timeout=5).json())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def seed(self, row: dict[str, Any], client: httpx.Client | None = None) -> dict[str, Any]:
        response = (client or httpx).post(f"{self.url}/seed_session", json=row, timeout=30)  # type: ignore[attr-defined]
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def counter_bridge(log_dir: Path) -> Iterator[BridgeProcess]:
    """The default environment (Gym's stateful counter), managed mode, shared by many tests."""
    bridge = BridgeProcess(args=[]).start(log_dir)
    yield bridge
    bridge.stop()


@pytest.fixture
def spawn_bridge(log_dir: Path) -> Iterator[Any]:
    started: list[BridgeProcess] = []

    def spawn(
        args: list[str], env: dict[str, str] | None = None, wait_ready: bool = True, **kw: Any
    ) -> BridgeProcess:
        bridge = BridgeProcess(args=args, env=env or {}, **kw)
        started.append(bridge)
        return bridge.start(log_dir, wait_ready=wait_ready)

    yield spawn
    for bridge in started:
        bridge.stop()


@pytest.fixture(scope="module")
def workplace_bridge(log_dir: Path) -> Iterator[BridgeProcess]:
    """``workplace_assistant`` in managed mode, one per test module (the harness tests share it)."""
    bridge = BridgeProcess(args=["--resources-server", "workplace_assistant"]).start(log_dir, timeout=240)
    yield bridge
    bridge.stop()


@pytest.fixture(scope="session")
def gym07_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The nemo-gym 0.7.0 interpreter, built (once; then stamp-cached) by the project's own builder."""
    from benchmarks import procs

    log = tmp_path_factory.mktemp("gym07-env") / "build.log"
    reason = procs.ensure_gym07_env(log)
    assert reason is None, f"{reason}\n{log.read_text(errors='replace')[-3000:] if log.exists() else ''}"
    return procs.GYM07_ENV / "bin" / "python"


@contextlib.contextmanager
def gym_servers(
    python: Path,
    script: Path,
    plan: dict[str, Any],
    log: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Gym's own servers (head server, agent servers) started by ``script`` in ``python``'s Gym, which
    writes ``plan["ready_file"]`` (the global config they serve under) once they are up."""
    ready = Path(plan["ready_file"])
    proc = subprocess.Popen(
        [str(python), str(script), json.dumps(plan)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not ready.exists():
            assert proc.poll() is None, f"Gym servers exited:\n{log.read_text(errors='replace')[-4000:]}"
            assert time.monotonic() < deadline, f"Gym servers not up:\n{log.read_text(errors='replace')}"
            time.sleep(0.2)
        yield json.loads(ready.read_text())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def boot_upstream(
    python: Path,
    server: str,
    port_file: Path,
    log: Path,
    env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
) -> subprocess.Popen[bytes]:
    """A Gym resources server started on its own with the bridge's boot script under ``python``, in
    its own process group (``wait_for_upstream`` gives its URL once it serves)."""
    return subprocess.Popen(
        [str(python), str(BOOT), "--server", server, "--host", host, "--port-file", str(port_file)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def wait_for_upstream(proc: subprocess.Popen[bytes], port_file: Path, log: Path, deadline: float) -> str:
    """The URL of an upstream started with the boot script, once it serves (``procs.wait_for_boot``)."""
    return wait_for_boot(proc, port_file, log, deadline - time.monotonic()).url


@dataclass
class UpstreamProcess:
    """A Gym resources server started directly with the boot script (for external mode)."""

    proc: subprocess.Popen[bytes]
    url: str
    pid: int


@pytest.fixture
def gym_upstream(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(server: str = "example_session_state_mgmt", host: str = "127.0.0.1") -> UpstreamProcess:
        port_file = tmp_path / f"port-{len(started)}.json"
        log = tmp_path / f"upstream-{len(started)}.log"
        proc = boot_upstream(GYM_PYTHON, server, port_file, log, host=host)
        started.append(proc)
        url = wait_for_upstream(proc, port_file, log, time.monotonic() + 120)
        return UpstreamProcess(proc=proc, url=url, pid=proc.pid)

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.asynccontextmanager
async def mcp_client(
    url: str, token: str | None = None, mode: str = "legacy", bearer: bool = False
) -> AsyncIterator[Client]:
    """The official MCP SDK client on streamable HTTP, with the session token header."""
    headers = {}
    if token is not None:
        headers = {"Authorization": f"Bearer {token}"} if bearer else {HEADER: token}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        yield client


def counter_row(initial: int, expected: int | None = None) -> dict[str, Any]:
    row = dict(gym_data("example_session_state_mgmt")[0])
    row["initial_count"] = initial
    row["expected_count"] = expected if expected is not None else initial
    return row


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """The Docker engine of the container tests (tests/container_helpers.py), one per session."""
    from container_helpers import engine_session

    yield from engine_session()


@pytest.fixture(scope="session")
def docker_image(docker_engine: Any) -> Iterator[str]:
    """The project's image, built once per session and shared by every container test."""
    from container_helpers import image_session

    yield from image_session(docker_engine)


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    """The Kubernetes example as `kubectl kustomize examples/kubernetes` builds it (tests/kube_helpers.py)."""
    from kube_helpers import built

    return built()


@pytest.fixture
def apiserver(tmp_path: Path, docs: list[dict[str, Any]]) -> Iterator[Any]:
    """The Kubernetes API server test double, authorizing with the shipped Role and RoleBinding."""
    from kube_helpers import FakeApiServer

    rbac = [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    server = FakeApiServer(tmp_path, rbac)
    try:
        yield server
    finally:
        server.close()
