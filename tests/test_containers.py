"""Container tests: the real Dockerfile, built and run, and compose.yaml brought up.

Marked `containers`. They run on a real Docker engine (Debian's docker.io, started by
scripts/setup-docker.sh) through the Docker SDK for Python, on the local stand-in base image
(scripts/ci-containers.sh makes both). They are skipped, with the reason, only when no engine
answers, and never under ``CI=true``: there a missing engine is installed and started first, and
one that still does not answer fails the run. The compose tests that play a user are in
tests/test_compose.py.

The image is built once per session through the Docker SDK for Python (layers cached by the
engine) and kept under the tag localhost/gym-mcp-bridge:test as the cache for the next run
(GYM_MCP_BRIDGE_TEST_REMOVE_IMAGE=1 removes it at the end). Containers, compose projects and
networks the tests create are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
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
    key_file,
    mcp_call,
    pids_with_env,
    responses_object,
    result_json,
    rollout,
    running,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]


# One engine and one image build per test session, shared with tests/test_compose.py: the
# session fixtures docker_engine and docker_image live in tests/conftest.py.
@pytest.fixture
def engine(docker_engine: Engine) -> Engine:
    return docker_engine


@pytest.fixture
def image(docker_image: str) -> str:
    return docker_image


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    return key_file(tmp_path, "bridge_secret")


@pytest.fixture
def api_key(tmp_path: Path) -> Path:
    return key_file(tmp_path, "bridge_api_key")


def image_healthcheck(engine: Engine, image: str) -> dict[str, Any]:
    """The image's HEALTHCHECK."""
    found = engine.client.images.get(image).attrs.get("Config", {}).get("Healthcheck")
    assert found, f"{image} has no HEALTHCHECK"
    return dict(found)


def test_image_rollout(engine: Engine, image: str, secret: Path) -> None:
    """docker run the image: healthcheck passes, non-root, one full rollout through the port."""
    t0 = time.monotonic()
    with running(engine, image, secret) as box:
        health = box.wait_ready()
        TIMINGS["image_start_to_ready_s"] = time.monotonic() - t0
        assert health["advertise_url"] == box.base_url
        assert health["bound"] == {"host": "0.0.0.0", "port": box.port}, health

        # The image's own HEALTHCHECK command passes inside the container, and Docker runs it on
        # its schedule until the container is "healthy".
        config = engine.client.images.get(image).attrs["Config"]
        test = image_healthcheck(engine, image)["Test"]
        assert test[0] == "CMD" and "/healthz" in " ".join(test), test
        code, out = box.exec(*test[1:])
        assert code == 0, out
        deadline = time.monotonic() + 60
        while box.container.attrs["State"].get("Health", {}).get("Status") != "healthy":
            assert time.monotonic() < deadline, box.container.attrs["State"]
            time.sleep(1)
            box.container.reload()

        code, out = box.exec("id", "-u")
        assert code == 0 and out.strip() not in ("", "0"), f"runs as uid {out.strip()!r}"
        assert not any("SECRET=" in e for e in config.get("Env") or []), config.get("Env")

        # DNS-rebinding protection is on in the container too (bound to 0.0.0.0): a foreign Host is
        # refused, the loopback names a published port is reached under are served
        foreign = httpx.post(f"{box.base_url}/seed_session", json={}, headers={"host": "attacker.example"})
        assert foreign.status_code == 421, foreign.text
        local = httpx.get(f"{box.base_url}/readyz", headers={"host": f"localhost:{box.port}"})
        assert local.status_code == 200

        # The image alone requires the API key it generated (show-config prints it).
        refused = httpx.post(f"{box.base_url}/seed_session", json=SEED_ROW, timeout=30)
        assert refused.status_code == 401, refused.text
        t1 = time.monotonic()
        seen = rollout(box.base_url, api_key=box.api_key())
        TIMINGS["rollout_s"] = time.monotonic() - t1
        assert seen == {"counter": 6, "reward_5": 0.0, "reward_6": 1.0}
        assert "Traceback" not in box.logs(), box.logs()


@pytest.mark.parametrize("case", ["missing", "unreadable", "empty"])
def test_bad_secret_file_is_a_clear_startup_error(
    engine: Engine, image: str, tmp_path: Path, case: str
) -> None:
    """GYM_MCP_BRIDGE_SECRET_FILE naming a missing, unreadable (0600, another owner: the usual
    compose/Docker mistake) or empty file: the container exits non-zero with one line naming the
    file, no traceback, and never falls back to an ephemeral key."""
    path = tmp_path / "bridge_secret"
    tmp_path.chmod(0o755)
    if case == "unreadable":
        path.write_text(os.urandom(32).hex() + "\n")
        path.chmod(0o600)  # owned by the test's user, not the container's uid 10001
    elif case == "empty":
        path.write_text("")
        path.chmod(0o644)
    secret = None if case == "missing" else path
    with running(engine, image, secret, {"GYM_MCP_BRIDGE_SECRET_FILE": "/run/secrets/bridge_secret"}) as box:
        result = box.container.wait(timeout=120)
        logs = box.logs()
        assert result["StatusCode"] != 0, logs
        assert "Traceback" not in logs, logs
        if case != "empty":
            assert "/run/secrets/bridge_secret" in logs, logs
        else:
            assert "key" in logs.lower(), logs


def test_sigterm_drains_inflight_call(engine: Engine, image: str, secret: Path) -> None:
    """SIGTERM during an in-flight tools/call: the call completes, the session stays served until it is
    closed, then the container exits 0 by itself, nothing is left."""
    with running(engine, image, secret) as box:
        health = box.wait_ready()
        upstream_pid = health["upstream"]["pid"]
        assert upstream_pid, health
        visible = pids_with_env(box.marker)  # host view of the container's processes (local engines)

        seeded = httpx.post(f"{box.base_url}/seed_session", json=SEED_ROW, headers=box.auth(), timeout=30)
        assert seeded.status_code == 200, seeded.text
        meta = seeded.json()["mcp"]
        headers = {TOKEN_HEADER: meta["headers"][TOKEN_HEADER]}

        def signal_upstream(sig: str) -> None:
            code, out = box.exec("python3", "-c", f"import os, signal; os.kill({upstream_pid}, signal.{sig})")
            assert code == 0, out

        # Freeze the upstream so the call is certainly in flight when SIGTERM arrives.
        signal_upstream("SIGSTOP")
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                outcome["results"] = asyncio.run(
                    mcp_call(meta["url"], headers, [("increment_counter", {"count": 2})])
                )
            except BaseException as exc:
                outcome["error"] = exc

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        time.sleep(2.0)
        assert caller.is_alive(), outcome
        t0 = time.monotonic()
        box.container.kill(signal="SIGTERM")
        time.sleep(2.0)
        assert box.status() == "running", f"the bridge must wait for the in-flight call:\n{box.logs()}"
        signal_upstream("SIGCONT")
        caller.join(60)
        assert not caller.is_alive(), "the in-flight call never finished"
        assert "error" not in outcome, f"{outcome.get('error')!r}\n{box.logs()}"
        assert result_json(outcome["results"][0]) == {"success": True}
        # The session is still open: the bridge drains it (its sessions, not just its calls) until
        # it is finished, then exits by itself.
        time.sleep(1.0)
        assert box.status() == "running", f"the bridge must wait for the open session:\n{box.logs()}"
        closed = httpx.post(
            f"{box.base_url}/close_session", json={}, headers={**box.auth(), **headers}, timeout=30
        )
        assert closed.status_code == 200, closed.text

        exit_status = box.container.wait(timeout=60)
        TIMINGS["sigterm_to_exit_s"] = time.monotonic() - t0
        logs = box.logs()
        assert exit_status["StatusCode"] == 0, logs
        assert "Traceback" not in logs, logs
        if visible:
            time.sleep(0.5)
            assert pids_with_env(box.marker) == [], "processes of the container outlived it"


# ------------------------------------------------------------------------------- compose


def test_compose_both_profiles(engine: Engine, image: str, secret: Path, api_key: Path) -> None:
    """compose.yaml + compose.secrets.yaml up with the sidecar profile: the default bridge
    (managed) and the sidecar pair (Gym container + bridge in external mode) each serve a full
    rollout, with the signing key and API key from the files given (explicit keys win over the
    generated ones: the generated files are never made)."""
    project = f"gmbtest{uuid.uuid4().hex[:8]}"
    port, sidecar_port = free_port(), free_port()
    env = {
        **os.environ,
        "GYM_MCP_BRIDGE_IMAGE": image,
        "GYM_MCP_BRIDGE_SECRET_PATH": str(secret),
        "GYM_MCP_BRIDGE_API_KEY_PATH": str(api_key),
        "GYM_MCP_BRIDGE_PUBLISH_HOST": "127.0.0.1",
        "GYM_MCP_BRIDGE_PUBLISH_PORT": str(port),
        "GYM_MCP_BRIDGE_SIDECAR_PUBLISH_PORT": str(sidecar_port),
        "GYM_MCP_BRIDGE_ADVERTISE_URL": f"http://127.0.0.1:{port}",
        "GYM_MCP_BRIDGE_SIDECAR_ADVERTISE_URL": f"http://127.0.0.1:{sidecar_port}",
    }
    files = ["-f", str(ROOT / "compose.yaml"), "-f", str(ROOT / "compose.secrets.yaml")]
    base = [*compose_command(), *files, "-p", project, "--profile", "sidecar"]

    def compose(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*base, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        if check:
            assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    t0 = time.monotonic()
    try:
        compose("up", "-d", "--no-build")
        for name, p in (("bridge", port), ("bridge-sidecar", sidecar_port)):
            url = f"http://127.0.0.1:{p}"
            deadline = time.monotonic() + 240
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    logs = compose("logs", check=False)
                    pytest.fail(f"{name} not ready:\n{logs.stdout[-6000:]}\n{logs.stderr[-2000:]}")
                time.sleep(0.5)
            TIMINGS[f"compose_{name}_ready_s"] = time.monotonic() - t0
            health = httpx.get(f"{url}/healthz", timeout=5).json()
            assert health["advertise_url"] == url
            mode = health["upstream"]["mode"]
            assert mode == ("external" if name == "bridge-sidecar" else "managed"), health
            assert health["rest_auth"] == "api_key", health
            assert httpx.post(f"{url}/seed_session", json={}, timeout=10).status_code == 401  # no key
            seen = rollout(url, api_key=api_key.read_text().strip())
            assert seen == {"counter": 6, "reward_5": 0.0, "reward_6": 1.0}, (name, seen)
        state = compose("exec", "-T", "bridge", "ls", "-A", "/var/lib/gym-mcp-bridge").stdout.split()
        assert state == [], f"keys were generated although files were given: {state}"
    finally:
        t1 = time.monotonic()
        compose("down", "-v", "--timeout", "30", check=False)
        TIMINGS["compose_down_s"] = time.monotonic() - t1
        TIMINGS["compose_total_s"] = time.monotonic() - t0
        leftovers = engine.client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"}
        )
        for c in leftovers:
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
        assert not leftovers, f"compose down left {[c.name for c in leftovers]}"


# ------------------------------------------------------------------- the Kubernetes pod


def test_kubernetes_pod_layout(engine: Engine, image: str, secret: Path, api_key: Path) -> None:
    """The StatefulSet's pod, without Kubernetes: its two containers as written in
    examples/kubernetes/statefulset.yaml (commands, args, env, read-only root, /tmp) sharing one
    network namespace. The resources server's probe passes, a rollout works through the bridge in
    external mode, and the resources server's preStop hook holds until the bridge has drained and
    exited after SIGTERM."""
    import yaml

    sts = yaml.safe_load((ROOT / "examples" / "kubernetes" / "statefulset.yaml").read_text())
    pod = sts["spec"]["template"]["spec"]
    spec = {c["name"]: c for c in pod["containers"]}
    gym_spec, bridge_spec = spec["resources-server"], spec["bridge"]
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"

    def env_of(container: dict[str, Any]) -> dict[str, str]:
        env = {}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
        return env

    bridge_env = env_of(bridge_spec)
    bridge_env["POD_NAME"], bridge_env["POD_NAMESPACE"] = "gym-mcp-bridge-0", "test"
    # The pod DNS name does not resolve here; advertise what the test can reach, on the same port
    # inside the pod as outside (readyz checks the advertise URL from inside).
    bridge_env["GYM_MCP_BRIDGE_ADVERTISE_URL"] = base_url
    bridge_env["GYM_MCP_BRIDGE_PORT"] = str(port)
    secret_path = bridge_env["GYM_MCP_BRIDGE_SECRET_FILE"]
    common = {
        "read_only": True,
        "tmpfs": {"/tmp": ""},
        "cap_drop": ["ALL"],
        "labels": {"gym-mcp-bridge.test": "1"},
    }
    gym = bridge = None
    try:
        gym = engine.client.containers.run(
            image,
            entrypoint=gym_spec["command"],
            command=gym_spec["args"],
            environment=env_of(gym_spec),
            ports={f"{port}/tcp": ("127.0.0.1", port)},  # the pod's network namespace belongs to it
            detach=True,
            **common,
        )
        bridge = engine.client.containers.run(
            image,
            command=bridge_spec["args"],
            environment=bridge_env,
            volumes={
                str(secret): {"bind": secret_path, "mode": "ro"},
                str(api_key): {"bind": bridge_env["GYM_MCP_BRIDGE_API_KEY_FILE"], "mode": "ro"},
            },
            network_mode=f"container:{gym.id}",
            detach=True,
            **common,
        )

        def logs() -> str:
            out = []
            for c in (gym, bridge):
                with contextlib.suppress(Exception):
                    out.append(c.logs().decode(errors="replace")[-4000:])
            return "\n---\n".join(out)

        deadline = time.monotonic() + 240
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base_url}/readyz", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"pod not ready:\n{logs()}"
            time.sleep(0.5)
        health = httpx.get(f"{base_url}/healthz", timeout=5).json()
        assert health["upstream"]["mode"] == "external", health
        probe = gym_spec["livenessProbe"]["exec"]["command"]
        code, out = gym.exec_run(probe)
        assert code == 0, out
        assert rollout(base_url, api_key=api_key.read_text().strip()) == {
            "counter": 6,
            "reward_5": 0.0,
            "reward_6": 1.0,
        }

        # preStop of the resources server: blocks while the bridge runs, returns once it is gone.
        prestop = gym_spec["lifecycle"]["preStop"]["exec"]["command"]
        finished: dict[str, Any] = {}

        def run_prestop() -> None:
            t = time.monotonic()
            finished["code"] = gym.exec_run(prestop)[0]
            finished["at"] = time.monotonic()
            finished["took"] = finished["at"] - t

        hook = threading.Thread(target=run_prestop, daemon=True)
        hook.start()
        time.sleep(3)
        assert hook.is_alive(), f"preStop returned while the bridge was still serving: {finished}"
        bridge.kill(signal="SIGTERM")
        exit_status = bridge.wait(timeout=60)
        exited_at = time.monotonic()
        hook.join(30)
        assert not hook.is_alive(), "preStop still waiting after the bridge exited"
        assert finished["code"] == 0
        assert finished["at"] - exited_at < 5, finished
        assert exit_status["StatusCode"] == 0, logs()
        gym.stop(timeout=30)
        assert gym.wait(timeout=30)["StatusCode"] in (0, 130, 143), logs()  # SIGINT/SIGTERM exit of uvicorn
    finally:
        for c in (bridge, gym):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.remove(force=True, v=True)


# ------------------------------------------------------------------------------ replicas


async def _call_expecting_refusal(url: str, headers: dict[str, str]) -> str:
    """tools/call with a token another replica issued: returns the refusal's text."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    try:
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("increment_counter", {"count": 1})
    except Exception as exc:  # a JSON-RPC error or an HTTP refusal
        return repr(exc) + str(getattr(exc, "error", ""))
    assert result.is_error, f"replica B served a call with replica A's token: {result}"
    return json.dumps(result.model_dump(mode="json"))


def test_two_replicas_pin_sessions_by_url(engine: Engine, image: str, secret: Path) -> None:
    """Two replicas of the image, same secret, different advertise URLs, forwarding off
    (``GYM_MCP_BRIDGE_PEERS=``: these containers cannot reach each other's published ports; the
    forwarding itself is tested between processes in tests/test_forwarding.py): a session seeded on
    A works on A; its token at B is refused with an answer naming A's URL; each /healthz reports
    its own bound address and advertise URL."""
    no_peers = {"GYM_MCP_BRIDGE_PEERS": ""}
    with running(engine, image, secret, no_peers) as a, running(engine, image, secret, no_peers) as b:
        health = {"a": a.wait_ready(), "b": b.wait_ready()}
        for name, box in (("a", a), ("b", b)):
            assert health[name]["advertise_url"] == box.base_url
            assert health[name]["bound"] == {"host": "0.0.0.0", "port": box.port}

        seeded = httpx.post(f"{a.base_url}/seed_session", json=SEED_ROW, headers=a.auth(), timeout=30)
        assert seeded.status_code == 200, seeded.text
        meta = seeded.json()["mcp"]
        assert meta["url"] == f"{a.base_url}/mcp"
        headers = {TOKEN_HEADER: meta["headers"][TOKEN_HEADER]}
        results = asyncio.run(mcp_call(meta["url"], headers, [("increment_counter", {"count": 1})]))
        assert result_json(results[0]) == {"success": True}

        refusal = asyncio.run(_call_expecting_refusal(f"{b.base_url}/mcp", headers))
        assert a.base_url in refusal, refusal
        verify = httpx.post(
            f"{b.base_url}/verify",
            json={**SEED_ROW, "expected_count": 4, "response": responses_object([], "4")},
            headers={**headers, **b.auth()},
            timeout=30,
        )
        assert 400 <= verify.status_code < 500, verify.text
        assert a.base_url in verify.text, verify.text
        # ...and A still scores its own session.
        verify = httpx.post(
            f"{a.base_url}/verify",
            json={**SEED_ROW, "expected_count": 4, "response": responses_object([], "4")},
            headers={**headers, **a.auth()},
            timeout=30,
        )
        assert verify.status_code == 200 and verify.json()["reward"] == 1.0, verify.text
