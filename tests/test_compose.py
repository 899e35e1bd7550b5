"""`docker compose` on a real Docker engine, played as a user: a fresh clone, the README's commands.

Walks a Docker user's road in a ``git clone`` of this repository: ``docker compose up -d --wait``
with nothing made first (no secrets/ files), the stack healthy, ``/seed_session`` without the key
refused 401 with one line, ``show-config`` printing the key and the MCP URL, the key file 0600 and
owned by uid 10001, the processes non-root, examples/quickstart.py at reward 1.0 from the host
(finding the key itself) and from the image (``docker compose run --rm quickstart``),
``down``/``up`` keeping the key while a token seeded before is refused as lost because the bridge
restarted, no traceback and no key in ``docker compose logs``. The replicas profile, scaled to
three, with one replica dying during calls: tests/test_compose_replica_death.py.

What stands in for the user's machine, and why: the image is the one tests/conftest.py built
once for the session (tagged as compose's image through GYM_MCP_BRIDGE_IMAGE, so ``up`` does not
build again: the same Dockerfile, built with PYTHON_BASE set to the local stand-in because no
registry is reachable here); the project name and host port are set through COMPOSE_PROJECT_NAME
and GYM_MCP_BRIDGE_PUBLISH_PORT (published on 127.0.0.1) so the test never meets a real deployment
on this machine. Expected values: the counter row (initial 3, +1 +2 = 6, reward 1.0; 5 -> 0.0), the
issue's wording for the refusals.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.containers import (
    ROOT,
    SEED_ROW,
    TIMINGS,
    TOKEN_HEADER,
    Engine,
    compose_command,
    free_port,
)
from tests.fixtures.harness import LocalStub, StubHandler
from tests.fixtures.helpers import claims_of

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]


@dataclass
class Clone:
    path: Path
    project: str
    port: int
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def compose(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*compose_command(), *args],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            logs = subprocess.run(
                [*compose_command(), "--profile", "replicas", "logs", "--no-color", "--tail", "15"],
                cwd=self.path,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=120,
            ).stdout
            raise AssertionError(
                f"compose {' '.join(args)}: {proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\nlogs:\n{logs[-6000:]}"
            )
        return proc


@pytest.fixture(scope="module")
def clone(
    docker_engine: Engine, docker_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Clone]:
    """A fresh clone of the committed tree; its compose projects are removed with their volumes."""
    path = tmp_path_factory.mktemp("clone") / "gym-mcp-bridge"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], check=True, timeout=120)
    assert not (path / "secrets" / "bridge_secret").exists()
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GYM_MCP_BRIDGE_", "COMPOSE_"))},
        "COMPOSE_PROJECT_NAME": f"gmbroad{uuid.uuid4().hex[:8]}",
        "GYM_MCP_BRIDGE_IMAGE": docker_image,
        "PYTHON_BASE": "python:3.12-slim",  # what a user behind a registry mirror sets (.env.example)
        "GYM_MCP_BRIDGE_PUBLISH_HOST": "127.0.0.1",
        "GYM_MCP_BRIDGE_PUBLISH_PORT": str(port),
    }
    box = Clone(path, env["COMPOSE_PROJECT_NAME"], port, env)
    try:
        yield box
    finally:
        box.compose(
            "--profile", "replicas", "--profile", "quickstart", "down", "-v", "--timeout", "30", check=False
        )
        for c in docker_engine.client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={box.project}"}
        ):
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)


def one_line(text: str) -> str:
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text.strip()


# Run in the quickstart container: every readable file holding the signing key (argv[1]).
FIND_KEY = r"""
import json, os, sys
found = []
for top in ("/var/lib", "/run", "/opt/quickstart.py", "/tmp", "/home"):
    for root, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    if sys.argv[1].encode() in f.read(1 << 20):
                        found.append(path)
            except OSError:
                pass
print(json.dumps(found))
"""


class StrangerBridge(LocalStub):
    """A loopback HTTP server that answers /readyz and /healthz like a bridge serving the counter
    and requiring a key, and records the headers of every other request: where a leaked key would
    arrive. It passes every check the quickstart makes before it looks for a key."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        super().__init__()

    @property
    def url(self) -> str:
        return self.root_url

    def _handler(self) -> type[StubHandler]:
        stranger = self

        class Handler(StubHandler):
            paths = stranger.paths

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                self._send(status, json.dumps(body).encode())

            def do_GET(self) -> None:  # http.server calls the handler by this name
                if self.path == "/readyz":
                    self._answer(200, {"ready": True})
                elif self.path == "/healthz":
                    self._answer(
                        200,
                        {
                            "status": "ok",
                            "rest_auth": "api_key",
                            "upstream": {"server_name": "example_session_state_mgmt"},
                        },
                    )
                else:
                    self._answer(404, {"detail": "not found"})

            def do_POST(self) -> None:
                stranger.seen.append({k.lower(): v for k, v in self.headers.items()})
                self._answer(401, {"detail": "missing or wrong API key"})

        return Handler


def test_compose_up_alone_on_a_fresh_clone(clone: Clone, docker_engine: Engine) -> None:
    t0 = time.monotonic()
    clone.compose("up", "-d", "--wait")  # the README's command
    TIMINGS["compose_up_to_healthy_s"] = time.monotonic() - t0
    url = clone.url

    refused = httpx.post(f"{url}/seed_session", json=SEED_ROW, timeout=30)
    assert refused.status_code == 401, refused.text
    assert "API key" in one_line(refused.json()["detail"])

    shown = json.loads(
        clone.compose("exec", "-T", "bridge", "gym-mcp-bridge", "show-config", "--json").stdout
    )
    key = shown["api_key"]
    assert len(key) == 64 and shown["mcp_url"] == f"http://localhost:{clone.port}/mcp", shown
    text = clone.compose("exec", "-T", "bridge", "gym-mcp-bridge", "show-config").stdout
    assert f"API key:   {key}" in text and f"MCP URL:   http://localhost:{clone.port}/mcp" in text, text

    assert clone.compose("exec", "-T", "bridge", "id", "-u").stdout.strip() == "10001"
    modes = clone.compose(
        "exec",
        "-T",
        "bridge",
        "stat",
        "-c",
        "%a %u %n",
        "/var/lib/gym-mcp-bridge-api/api_key",
        "/var/lib/gym-mcp-bridge/signing_key",
    ).stdout.split("\n")
    assert [m.split()[:2] for m in modes if m] == [["600", "10001"], ["600", "10001"]], modes
    container = docker_engine.client.containers.get(clone.compose("ps", "-q", "bridge").stdout.strip())
    top = container.top(ps_args="-o pid,uid,args")
    uid = top["Titles"].index("UID")
    assert top["Processes"] and all(p[uid] == "10001" for p in top["Processes"]), top

    # The quickstart from the host: no key given, it finds the compose deployment's key itself.
    quick = subprocess.run(
        [sys.executable, "examples/quickstart.py", "--url", f"http://localhost:{clone.port}"],
        cwd=clone.path,
        env=clone.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert quick.returncode == 0 and quick.stdout.splitlines()[-1] == "reward: 1.0", (
        quick.stdout + quick.stderr
    )
    assert f"using the API key of compose project {clone.project}" in quick.stdout, quick.stdout
    # ... and never sends that key anywhere else: a loopback server that answers like a bridge.
    with StrangerBridge() as stranger:
        sent = subprocess.run(
            [sys.executable, "examples/quickstart.py", "--url", stranger.url],
            cwd=clone.path,
            env=clone.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert sent.returncode == 1, sent.stdout + sent.stderr
    line = one_line(sent.stderr)
    assert f"project {clone.project}" in line and "its key is not sent there" in line, line
    assert stranger.seen and all(
        "authorization" not in headers and key not in json.dumps(headers) for headers in stranger.seen
    ), stranger.seen
    for args, env, expected in (
        (["--api-key", "0" * 64], {}, "refused the API key from --api-key"),
        ([], {"PATH": "/nonexistent"}, "requires an API key"),  # no docker to ask: told what to pass
        (["--url", f"http://127.0.0.1:{free_port()}"], {}, "no bridge answers at"),
    ):
        failed = subprocess.run(
            [sys.executable, str(clone.path / "examples" / "quickstart.py"), "--url", url, *args],
            cwd=clone.path,
            env={**clone.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert failed.returncode == 1 and expected in one_line(failed.stderr), failed.stderr

    # ... and from the image, on the compose network, with the API key and nothing else.
    ran = clone.compose("run", "--rm", "quickstart")
    assert ran.stdout.splitlines()[-1] == "reward: 1.0", ran.stdout + ran.stderr
    signing_key = clone.compose("exec", "-T", "bridge", "cat", "/var/lib/gym-mcp-bridge/signing_key").stdout
    assert len(signing_key.strip()) == 64
    looked = clone.compose(
        "run", "--rm", "--entrypoint", "python", "quickstart", "-c", FIND_KEY, signing_key.strip()
    ).stdout
    assert json.loads(looked.strip().splitlines()[-1]) == [], (
        "the quickstart container can read the signing key"
    )

    # A session seeded before `down`/`up`: the key is kept, the token is refused as lost.
    seeded = httpx.post(
        f"{url}/seed_session", json=SEED_ROW, headers={"authorization": f"Bearer {key}"}, timeout=30
    ).json()
    token = seeded["mcp"]["headers"][TOKEN_HEADER]
    sid = claims_of(token)["sid"]
    t1 = time.monotonic()
    clone.compose("down", "--timeout", "30")
    clone.compose("up", "-d", "--wait")
    TIMINGS["compose_down_up_to_healthy_s"] = time.monotonic() - t1
    again = json.loads(
        clone.compose("exec", "-T", "bridge", "gym-mcp-bridge", "show-config", "--json").stdout
    )
    assert again["api_key"] == key
    lost = httpx.post(
        f"{url}/get_counter_value",
        json={},
        headers={TOKEN_HEADER: token, "authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert lost.status_code == 409, lost.text
    assert "bridge restarted" in one_line(lost.json()["detail"]) and sid in lost.json()["detail"]
    mcp_lost = httpx.post(
        f"{url}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "get_counter_value", "arguments": {}},
        },
        headers={
            TOKEN_HEADER: token,
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18",
        },
        timeout=30,
    )
    assert "bridge restarted" in mcp_lost.text and sid in mcp_lost.text, mcp_lost.text

    logs = clone.compose("logs", "--no-color").stdout
    assert "Traceback" not in logs, logs[-6000:]
    assert key not in logs, "the API key was written to the logs"
    assert "show-config" in logs and "/var/lib/gym-mcp-bridge-api/api_key" in logs, logs[-3000:]
    clone.compose("down", "--timeout", "30")
