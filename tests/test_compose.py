"""`docker compose` on a real Docker engine, played as a user: a fresh clone, the README's commands.

Walks a Docker user's road in a ``git clone`` of this repository: ``docker compose up -d --wait``
with nothing made first (no secrets/ files), the stack healthy, ``/seed_session`` without the key
refused 401 with one line, ``show-config`` printing the key and the MCP URL, the key file 0600 and
owned by uid 10001, the processes non-root, examples/quickstart.py at reward 1.0 from the host
(finding the key itself) and from the image (``docker compose run --rm quickstart``),
``down``/``up`` keeping the key while a token seeded before is refused as lost because the bridge
restarted, no traceback and no key in ``docker compose logs``; then the replicas profile scaled to
three, driven from a client container on the compose network.

What stands in for the user's machine, and why: the image is the one tests/conftest.py built
once for the session (tagged as compose's image through GYM_MCP_BRIDGE_IMAGE, so ``up`` does not
build again: the same Dockerfile, built with PYTHON_BASE set to the local stand-in because no
registry is reachable here); the project name and host port are set through COMPOSE_PROJECT_NAME
and GYM_MCP_BRIDGE_PUBLISH_PORT (published on 127.0.0.1) so the test never meets a real deployment
on this machine. Expected values: the counter row (initial 3, +1 +2 = 6, reward 1.0; 5 -> 0.0), the
issue's wording for the refusals.
"""

from __future__ import annotations

import base64
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
from container_helpers import (
    ROOT,
    SEED_ROW,
    TIMINGS,
    TOKEN_HEADER,
    Engine,
    compose_command,
    free_port,
    responses_object,
)

pytestmark = [pytest.mark.containers, pytest.mark.timeout(1500)]


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


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's payload, unverified (the test reads which replica issued it)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def one_line(text: str) -> str:
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text.strip()


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
        "/var/lib/gym-mcp-bridge/api_key",
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

    # ... and from the image, on the compose network.
    ran = clone.compose("run", "--rm", "quickstart")
    assert ran.stdout.splitlines()[-1] == "reward: 1.0", ran.stdout + ran.stderr

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
    assert "show-config" in logs and "/var/lib/gym-mcp-bridge/api_key" in logs, logs[-3000:]
    clone.compose("down", "--timeout", "30")


# --------------------------------------------------------------------------------- replicas

# Runs in a client container on the compose network (the image's own Python, httpx and MCP SDK).
# Docker's DNS answers the service name with every replica's address; each request goes to the next
# address on a new connection with Host: replica:8000 (no affinity), so most requests land on a
# replica that does not own the session and are forwarded to the owner.
CLIENT = r"""
import asyncio, json, os, socket, sys, time
import httpx, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

KEY = os.environ["KEY"]; REPLICAS = int(os.environ["REPLICAS"]); SESSIONS = int(os.environ["SESSIONS"])
RESPONSE = json.loads(os.environ["RESPONSE"]); HOST = "replica:8000"

def resolve():
    return sorted({a[4][0] for a in socket.getaddrinfo("replica", 8000, proto=socket.IPPROTO_TCP)})

def call(addr, path, body, token=None):
    headers = {"host": HOST, "authorization": f"Bearer {KEY}"}
    if token:
        headers["X-NeMo-Gym-Session-Token"] = token
    with httpx.Client(timeout=120) as http:  # a new connection for every request
        r = http.post(f"http://{addr}:8000{path}", json=body, headers=headers)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text

async def mcp_increment(addr, token, count):
    headers = {"host": HOST, "X-NeMo-Gym-Session-Token": token}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as h, Client(
        streamable_http_client(f"http://{addr}:8000/mcp", http_client=h), mode="legacy"
    ) as client:
        result = await client.call_tool("increment_counter", {"count": count})
        return bool(result.is_error), " ".join(getattr(c, "text", "") for c in result.content)

addrs = resolve()
deadline = time.monotonic() + 60
while len(addrs) < REPLICAS and time.monotonic() < deadline:
    time.sleep(0.5); addrs = resolve()
advertised = {a: httpx.get(f"http://{a}:8000/healthz", headers={"host": HOST}).json()["advertise_url"] for a in addrs}
sessions = []
for s in range(SESSIONS):
    row = {"responses_create_params": {"input": []}, "initial_count": 10 * s}
    status, seed = call(addrs[s % len(addrs)], "/seed_session", row)
    assert status == 200, seed
    token = seed["mcp"]["headers"]["X-NeMo-Gym-Session-Token"]
    for k in (1, 2, 3):
        status, out = call(addrs[(s + k) % len(addrs)], "/increment_counter", {"count": k}, token)
        assert status == 200 and out == {"success": True}, (status, out)
    is_error, text = asyncio.run(mcp_increment(addrs[(s + 1) % len(addrs)], token, 4))
    assert not is_error, text
    status, value = call(addrs[(s + 2) % len(addrs)], "/get_counter_value", {}, token)
    sessions.append({"seeded_at": addrs[s % len(addrs)], "token": token, "initial": 10 * s, "value": value})
print("PHASE1 " + json.dumps({"addrs": addrs, "advertised": advertised, "sessions": sessions}), flush=True)

deadline = time.monotonic() + 90  # the test kills one replica now: wait until DNS drops it
while len(resolve()) >= len(addrs) and time.monotonic() < deadline:
    time.sleep(0.5)
alive = resolve()
results = []
for i, s in enumerate(sessions):
    token, expected = s["token"], s["initial"] + 10
    out = {"token": token, "steps": []}
    via = alive[i % len(alive)]
    out["steps"].append(call(via, "/increment_counter", {"count": 5}, token))
    out["steps"].append(call(alive[(i + 1) % len(alive)], "/get_counter_value", {}, token))
    for exp in (expected + 5, expected + 4):
        body = {"responses_create_params": {"input": []}, "initial_count": s["initial"], "expected_count": exp,
                "response": RESPONSE}
        out["steps"].append(call(alive[(i + 2) % len(alive)], "/verify", body, token))
    results.append(out)
print("PHASE2 " + json.dumps({"alive": alive, "results": results}), flush=True)
"""


def test_compose_replicas_scaled_no_affinity_and_a_killed_replica(
    clone: Clone, docker_engine: Engine
) -> None:
    replicas, sessions = 3, 9
    key = "k" * 16 + uuid.uuid4().hex  # an explicit key from the environment wins over the generated one
    env_before = dict(clone.env)
    clone.env["GYM_MCP_BRIDGE_API_KEY"] = key
    client = None
    try:
        t0 = time.monotonic()
        clone.compose(
            "--profile", "replicas", "up", "-d", "--wait", "--scale", f"replica={replicas}", "replica"
        )
        TIMINGS["compose_replicas_up_to_healthy_s"] = time.monotonic() - t0
        containers = {
            c.attrs["Config"]["Hostname"]: c
            for c in docker_engine.client.containers.list(
                filters={
                    "label": [
                        f"com.docker.compose.project={clone.project}",
                        "com.docker.compose.service=replica",
                    ]
                }
            )
        }
        assert len(containers) == replicas, containers
        network = f"{clone.project}_default"
        client = docker_engine.client.containers.run(
            docker_image_of(clone),
            entrypoint=["python", "-c", CLIENT],
            environment={
                "KEY": key,
                "REPLICAS": str(replicas),
                "SESSIONS": str(sessions),
                "RESPONSE": json.dumps(responses_object([], "done")),
                "HOME": "/tmp",
            },
            network=network,
            detach=True,
            labels={"gym-mcp-bridge.test": "1"},
        )
        phase1 = wait_for_line(client, "PHASE1 ", 300)
        owners = {}
        for s in phase1["sessions"]:
            assert s["value"] == {"count": s["initial"] + 10}, s  # 1+2+3 over REST, 4 over MCP, via others
            owners[s["token"]] = claims_of(s["token"])["iss"]
        advertised = phase1["advertised"]
        assert len(phase1["addrs"]) == replicas, phase1["addrs"]
        for addr, url in advertised.items():  # each replica advertises its own container hostname
            assert url.removeprefix("http://").removesuffix(":8000") in containers, (addr, url)
        assert {owners[s["token"]] for s in phase1["sessions"]} == set(advertised.values())

        victim_url = advertised[phase1["addrs"][0]]
        victim = containers[victim_url.removeprefix("http://").removesuffix(":8000")]
        victim.kill()  # mid-run: the client is waiting for DNS to drop it
        phase2 = wait_for_line(client, "PHASE2 ", 300)
        assert client.wait(timeout=60)["StatusCode"] == 0, client.logs().decode()[-3000:]
        assert len(phase2["alive"]) == replicas - 1

        lost = kept = 0
        for result in phase2["results"]:
            token = result["token"]
            session = next(s for s in phase1["sessions"] if s["token"] == token)
            steps = result["steps"]
            if owners[token] == victim_url:
                lost += 1
                for status, body in steps:  # every request refused, naming the lost owner; no reward
                    assert status == 502, (status, body)
                    assert victim_url in one_line(body["detail"]), body
            else:
                kept += 1
                assert steps[0] == [200, {"success": True}], steps
                assert steps[1] == [200, {"count": session["initial"] + 15}], steps
                assert steps[2][0] == 200 and steps[2][1]["reward"] == 1.0, steps[2]
                assert steps[3][0] == 200 and steps[3][1]["reward"] == 0.0, steps[3]
        assert lost == sessions // replicas and kept == sessions - lost, (lost, kept)
        logs = clone.compose("--profile", "replicas", "logs", "--no-color", "replica").stdout
        assert "Traceback" not in logs, logs[-6000:]
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.remove(force=True)
        clone.compose("--profile", "replicas", "down", "--timeout", "30", check=False)
        clone.env.clear()
        clone.env.update(env_before)


def docker_image_of(clone: Clone) -> str:
    return clone.env["GYM_MCP_BRIDGE_IMAGE"]


def wait_for_line(container: Any, prefix: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        for line in out.splitlines():
            if line.startswith(prefix):
                return dict(json.loads(line[len(prefix) :]))
        container.reload()
        if container.status in ("exited", "dead"):
            break
        time.sleep(0.5)
    raise AssertionError(
        f"no {prefix.strip()} line from the client container:\n{container.logs().decode()[-6000:]}"
    )
