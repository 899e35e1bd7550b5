"""The fixtures every test module shares: bridges and Gym servers started once and stopped at the
end (tests/fixtures/bridges.py holds what they start), the Docker engine and image, the Kubernetes
manifests and API server double; and the slow-road markers (tests/README.md) put on every test that
uses the Docker engine, marked in its module or not."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.bridges import (
    GYM_PYTHON,
    BridgeProcess,
    UpstreamProcess,
    boot_upstream,
    running_bridge,
    wait_for_upstream,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "docker_engine" in getattr(item, "fixturenames", ()) and item.get_closest_marker("docker") is None:
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def counter_bridge(log_dir: Path) -> Iterator[BridgeProcess]:
    """The default environment (Gym's stateful counter), managed mode, shared by many tests."""
    with running_bridge(log_dir) as bridge:
        yield bridge


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


@pytest.fixture(scope="session")
def workplace_bridge(log_dir: Path) -> Iterator[BridgeProcess]:
    """``workplace_assistant`` in managed mode, shared by every module that drives it (each test
    seeds sessions of its own)."""
    with running_bridge(log_dir, "--resources-server", "workplace_assistant") as bridge:
        yield bridge


@pytest.fixture(scope="session")
def gym07_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The nemo-gym 0.7.0 interpreter, built (once; then stamp-cached) by the project's own builder."""
    from tools import gym_env

    log = tmp_path_factory.mktemp("gym07-env") / "build.log"
    reason = gym_env.ensure_gym07_env(log)
    assert reason is None, f"{reason}\n{log.read_text(errors='replace')[-3000:] if log.exists() else ''}"
    return gym_env.GYM07_ENV / "bin" / "python"


@pytest.fixture(scope="session")
def counter_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    """Gym's stateful counter started alone with the bridge's boot script, shared by the tests that put
    a bridge of their own in front of it (each seeds sessions of its own)."""
    folder = tmp_path_factory.mktemp("counter-upstream")
    port_file, log = folder / "port.json", folder / "upstream.log"
    proc = boot_upstream(GYM_PYTHON, "example_session_state_mgmt", port_file, log)
    try:
        yield UpstreamProcess(
            proc=proc, url=wait_for_upstream(proc, port_file, log, time.monotonic() + 120), pid=proc.pid
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """The Docker engine of the container tests (tests/fixtures/containers.py), one per session."""
    from tests.fixtures.containers import engine_session

    yield from engine_session()


@pytest.fixture(scope="session")
def docker_image(docker_engine: Any) -> Iterator[str]:
    """The project's image, built once per session and shared by every container test."""
    from tests.fixtures.containers import image_session

    yield from image_session(docker_engine)


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    """The Kubernetes example as `kubectl kustomize examples/kubernetes` builds it (tests/fixtures/kube.py)."""
    from tests.fixtures.kube import built

    return built()


@pytest.fixture
def apiserver(tmp_path: Path, docs: list[dict[str, Any]]) -> Iterator[Any]:
    """The Kubernetes API server test double, authorizing with the shipped Role and RoleBinding."""
    from tests.fixtures.kube import FakeApiServer

    rbac = [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    server = FakeApiServer(tmp_path, rbac)
    try:
        yield server
    finally:
        server.close()
