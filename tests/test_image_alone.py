"""The image alone, as an operator runs it with the ``docker`` CLI: no compose, no variables.

- ``docker run -p ... IMAGE``: the bridge generates its keys into its state directory and requires
  the API key (401 without it, and for ``Bearer`` with nothing after it), ``docker exec ...
  show-config`` prints the key, which is served; a named volume at the state directory keeps the key
  for the next container, a container without one gets a new key.
- ``--read-only`` with no volume: one line naming the folder to mount, exit 2, never an open door.
- PID 1 is an init process (dumb-init): an orphaned process is reaped (the control, the same image
  with ``--entrypoint gym-mcp-bridge``, keeps the zombie: the check can fail), and ``docker stop``
  reaches the bridge, which exits 0.
- The build context the engine receives holds nothing under any ``secrets/`` folder (the engine's own
  ``.dockerignore`` handling, on a clone with key files planted at several depths).

Expected values: the API key is the one ``show-config`` prints (the operator's road); the zombie is
read from ``/proc`` inside the container (state ``Z``).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.containers import ROOT, SEED_ROW, Engine, free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

DOCKER = shutil.which("docker") or "docker"


def docker(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done


class Operator:
    """Containers and volumes started with ``docker run`` in one test, removed at its end."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.names: list[str] = []
        self.volumes: list[str] = []

    def volume(self) -> str:
        name = f"gmb-alone-{uuid.uuid4().hex[:10]}"
        self.volumes.append(name)
        return name

    def run(self, *args: str, port: int | None = None) -> str:
        name = f"gmb-alone-{uuid.uuid4().hex[:10]}"
        self.names.append(name)
        publish = ["-p", f"127.0.0.1:{port}:8000"] if port else []
        docker("run", "-d", "--name", name, "--label", "gym-mcp-bridge.test=1", *publish, *args)
        return name

    def logs(self, name: str) -> str:
        done = docker("logs", name, check=False)
        return done.stdout + done.stderr

    def wait_ready(self, name: str, url: str, timeout: float = 240) -> dict[str, object]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    return dict(httpx.get(f"{url}/healthz", timeout=5).json())
            state = docker("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
            assert state == "running", f"{name} is {state}:\n{self.logs(name)[-4000:]}"
            time.sleep(0.5)
        raise AssertionError(f"{name} not ready in {timeout:.0f} s:\n{self.logs(name)[-4000:]}")

    def shown_key(self, name: str) -> str:
        text = docker("exec", name, "gym-mcp-bridge", "show-config").stdout
        (line,) = [line for line in text.splitlines() if line.startswith("API key:")]
        return line.split()[-1]

    def cleanup(self) -> None:
        for name in self.names:
            docker("rm", "-f", "-v", name, check=False)
        for name in self.volumes:
            docker("volume", "rm", "-f", name, check=False)


@pytest.fixture
def operator(docker_engine: Engine, docker_image: str) -> Iterator[Operator]:
    box = Operator(docker_image)
    try:
        yield box
    finally:
        box.cleanup()


def seed(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/seed_session", json=SEED_ROW, headers=headers, timeout=30)


def bare_bearer_status(port: int) -> int:
    """The status of a seed with ``Authorization: Bearer `` and nothing after it (http.client sends
    the value as given; httpx refuses it client-side)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps(SEED_ROW)
        headers = {"authorization": "Bearer ", "content-type": "application/json"}
        connection.request("POST", "/seed_session", body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_docker_run_alone_requires_the_key_it_generated_and_a_volume_keeps_it(operator: Operator) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = operator.run(operator.image, port=port)  # no variable, no volume
    health = operator.wait_ready(first, url)
    assert health["rest_auth"] == "api_key", health
    assert seed(url, {}).status_code == 401
    assert bare_bearer_status(port) == 401
    key = operator.shown_key(first)
    assert len(key) == 64
    assert seed(url, {"authorization": f"Bearer {key}"}).status_code == 200
    assert key not in operator.logs(first), "the API key was written to the log"
    docker("rm", "-f", first)

    # A container without a volume starts over with a new key; a named volume keeps it.
    volume = operator.volume()
    kept = []
    for _ in range(2):
        port = free_port()
        name = operator.run("-v", f"{volume}:/var/lib/gym-mcp-bridge", operator.image, port=port)
        operator.wait_ready(name, f"http://127.0.0.1:{port}")
        kept.append(operator.shown_key(name))
        docker("rm", "-f", name)
    assert kept[0] == kept[1] != key, (kept, key)
    listed = docker(
        "run", "--rm", "-v", f"{volume}:/state", "--entrypoint", "ls", operator.image, "-ln", "/state"
    ).stdout
    rows = {line.split()[-1]: line.split() for line in listed.splitlines()[1:]}
    assert set(rows) == {"api_key", "signing_key"}, listed
    assert all(r[0] == "-rw-------" and r[2] == "10001" for r in rows.values()), listed


def test_read_only_without_a_volume_is_a_one_line_error(operator: Operator) -> None:
    name = operator.run("--read-only", "--tmpfs", "/tmp", operator.image)
    code = docker("wait", name, timeout=120).stdout.strip()
    logs = operator.logs(name)
    assert code == "2", logs
    assert "Traceback" not in logs, logs
    (line,) = [line for line in logs.splitlines() if line.strip()]
    assert "cannot create /var/lib/gym-mcp-bridge/" in line and "Read-only file system" in line, line


ZOMBIES = (
    "import pathlib; print(sum(1 for p in pathlib.Path('/proc').glob('[0-9]*/stat') "
    "if p.read_text().rsplit(')', 1)[1].split()[0] == 'Z'))"
)


def zombies_after_an_orphan(name: str) -> int:
    # The inner shell starts `sleep` in the background and exits: the sleep is orphaned,
    # re-parented to PID 1, and must be reaped by it when it ends a second later.
    docker("exec", name, "sh", "-c", "sh -c 'sleep 1 &'")
    time.sleep(3)
    return int(docker("exec", name, "python3", "-c", ZOMBIES).stdout.strip())


def test_pid_1_is_an_init_that_reaps_orphans_and_passes_sigterm_on(operator: Operator) -> None:
    port = free_port()
    name = operator.run(operator.image, port=port)
    operator.wait_ready(name, f"http://127.0.0.1:{port}")
    cmdline = docker("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert Path(cmdline[0]).name == "dumb-init" and "gym-mcp-bridge" in cmdline, cmdline
    assert zombies_after_an_orphan(name) == 0

    t0 = time.monotonic()
    docker("stop", "-t", "30", name)  # SIGTERM to PID 1, passed on to the bridge
    stopped = time.monotonic() - t0
    state = json.loads(docker("inspect", "-f", "{{json .State}}", name).stdout)
    assert state["ExitCode"] == 0, (state, operator.logs(name)[-3000:])
    assert stopped < 25, f"docker stop took {stopped:.1f} s: SIGTERM did not reach the bridge"

    # Control: without the init, the bridge itself is PID 1 and the orphan stays a zombie.
    port = free_port()
    bare = operator.run("--entrypoint", "gym-mcp-bridge", operator.image, "serve", port=port)
    operator.wait_ready(bare, f"http://127.0.0.1:{port}")
    assert zombies_after_an_orphan(bare) == 1


def test_no_secrets_folder_reaches_the_build_context(docker_engine: Engine, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    planted = ["secrets/bridge_api_key", "examples/kubernetes/secrets/api-key", "deploy/prod/secrets/k"]
    for path in planted:
        (clone / path).parent.mkdir(parents=True, exist_ok=True)
        (clone / path).write_text("planted-key\n")
    tag = f"localhost/gmb-context-{uuid.uuid4().hex[:8]}"
    listing = "FROM scratch\nCOPY . /context/\n"
    build = subprocess.run(
        [DOCKER, "build", "-q", "-t", tag, "-f", "-", str(clone)],
        input=listing,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    try:
        container = docker_engine.client.containers.create(tag, command=["none"])
        try:
            with tarfile.open(fileobj=io.BytesIO(b"".join(container.export()))) as exported:
                names = exported.getnames()
        finally:
            container.remove(force=True)
    finally:
        docker_engine.client.images.remove(tag, force=True)
    assert "context/Dockerfile" in names and "context/bridge/settings.py" in names, names[:20]
    leaked = [n for n in names if "secrets" in n.split("/")]
    assert leaked == [], leaked
