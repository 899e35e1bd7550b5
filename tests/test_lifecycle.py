"""Managed and external upstream lifecycle, startup errors, health, against real Gym servers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.bridges import GYM_SITE, ROOT, SECRET, BridgeProcess, counter_row, free_port, pid_alive


def run_serve(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "bridge", "serve", *args],
        cwd=ROOT,
        env={**os.environ, "GYM_MCP_BRIDGE_SECRET": SECRET, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_unknown_environment_is_reported_at_once_with_exit_code_and_log_tail() -> None:
    started = time.monotonic()
    result = run_serve("--port", str(free_port()), "--resources-server", "no_such_module:Server")
    elapsed = time.monotonic() - started
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()
    assert line[0].startswith("gym-mcp-bridge: upstream no_such_module:Server exited with code 2"), (
        result.stderr
    )
    assert "cannot import no_such_module" in result.stderr
    assert "Traceback" not in result.stderr
    assert elapsed < 60, "an early death must be reported at once, not after the startup budget"


def test_startup_timeout_names_server_budget_and_log_tail() -> None:
    result = run_serve("--port", str(free_port()), "--startup-timeout-s", "0.5")
    assert result.returncode == 2
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith("gym-mcp-bridge: upstream example_session_state_mgmt not ready after "), (
        result.stderr
    )
    assert "of its 0.5s startup budget (startup_timeout_s)" in first
    assert "upstream_boot: loading example_session_state_mgmt" in result.stderr  # the log tail


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--port", "99999"],
            {},
            "--port / GYM_MCP_BRIDGE_PORT: Input should be less than or equal to 65535",
        ),
        ([], {"GYM_MCP_BRIDGE_PORT": "abc"}, "--port / GYM_MCP_BRIDGE_PORT: Input should be a valid integer"),
        (["--tools-from", "row,nonsense"], {}, "--tools-from / GYM_MCP_BRIDGE_TOOLS_FROM"),
        (["--upstream-url", "localhost:9"], {}, "must be an absolute http(s) URL"),
        (
            ["--gym-python", "/nonexistent/python"],
            {},
            "Gym environment interpreter not found at /nonexistent/python",
        ),
        (
            ["--upstream-url", "http://127.0.0.1:9", "--startup-timeout-s", "1"],
            {},
            "did not answer within 1s",
        ),
        (
            [],
            {"GYM_MCP_BRIDGE_SECRET": "short"},
            "every signing key must be at least 32 bytes (one is 5); make one with: openssl rand -hex 32",
        ),
        ([], {"GYM_MCP_BRIDGE_SECRET": "x" * 31}, "at least 32 bytes (one is 31)"),
        (
            [],
            {"GYM_MCP_BRIDGE_SECRET": "REPLACE-ME-with-the-output-of-openssl-rand-hex-32"},
            "the signing key is the placeholder shipped in the examples; make one with: openssl rand -hex 32",
        ),
    ],
)
def test_bad_settings_are_one_clear_line(args: list[str], env: dict[str, str], expected: str) -> None:
    port = [] if "--port" in args or "GYM_MCP_BRIDGE_PORT" in env else ["--port", str(free_port())]
    result = run_serve(*port, *args, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    message = [line for line in result.stderr.splitlines() if line.startswith("gym-mcp-bridge:")]
    assert len(message) == 1 and expected in message[0], result.stderr
    assert "Traceback" not in result.stderr


def test_port_in_use_is_one_line(counter_bridge: BridgeProcess) -> None:
    result = run_serve("--port", str(counter_bridge.port), timeout=60)
    assert result.returncode == 2
    assert f"port {counter_bridge.port} on 127.0.0.1 is already in use" in result.stderr


def test_upstream_bound_on_127_0_0_2_is_reported_and_probed_there(spawn_bridge, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    bridge = spawn_bridge(["--upstream-host", "127.0.0.2"])
    health = bridge.health()
    upstream = health["upstream"]
    assert upstream["bound_host"] == "127.0.0.2"
    assert upstream["url"].startswith("http://127.0.0.2:")
    assert upstream["ready"] is True and upstream["gym_version"] == "0.4.0"
    assert health["bound"] == {"host": "127.0.0.1", "port": bridge.port}
    assert health["advertise_url"] == bridge.url
    assert httpx.get(f"{bridge.url}/readyz").status_code == 200
    seed = bridge.seed(counter_row(4))
    token = seed["mcp"]["headers"]["X-NeMo-Gym-Session-Token"]
    value = httpx.post(
        f"{bridge.url}/get_counter_value", json={}, headers={"X-NeMo-Gym-Session-Token": token}
    )
    assert value.json() == {"count": 4}


def test_sigterm_stops_the_upstream_group_and_leaves_no_orphan(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    bridge: BridgeProcess = spawn_bridge([])
    upstream_pid = bridge.health()["upstream"]["pid"]
    assert pid_alive(upstream_pid)
    assert bridge.stop(signal.SIGTERM) == 0
    deadline = time.monotonic() + 10
    while pid_alive(upstream_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(upstream_pid)


def test_sigkill_of_the_bridge_still_takes_the_upstream_down(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    bridge: BridgeProcess = spawn_bridge([])
    upstream_pid = bridge.health()["upstream"]["pid"]
    bridge.stop(signal.SIGKILL)
    deadline = time.monotonic() + 15
    while pid_alive(upstream_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(upstream_pid), "the upstream outlived a SIGKILLed bridge"


def test_external_mode_reports_the_upstream_and_its_loss(spawn_bridge, gym_upstream) -> None:  # type: ignore[no-untyped-def]
    upstream = gym_upstream()
    bridge: BridgeProcess = spawn_bridge(["--upstream-url", upstream.url, "--server-name", "counter"])
    health = bridge.health()["upstream"]
    assert health["mode"] == "external" and health["url"] == upstream.url and health["pid"] is None
    seed = bridge.seed(counter_row(2))
    assert seed["mcp"]["server_name"] == "counter"
    ready = httpx.get(f"{bridge.url}/readyz")
    assert ready.status_code == 200 and ready.json()["upstream"] == upstream.url
    upstream.proc.send_signal(signal.SIGKILL)
    upstream.proc.wait()
    not_ready = httpx.get(f"{bridge.url}/readyz")
    assert not_ready.status_code == 503
    assert f"upstream {upstream.url} unreachable" in not_ready.json()["reason"]
    failed = httpx.post(
        f"{bridge.url}/get_counter_value",
        json={},
        headers={"X-NeMo-Gym-Session-Token": seed["mcp"]["headers"]["X-NeMo-Gym-Session-Token"]},
    )
    assert failed.status_code == 502 and "upstream failed on /get_counter_value" in failed.json()["detail"]


def counter_config() -> Path:
    """The config YAML nemo-gym ships for the counter environment."""
    assert GYM_SITE is not None
    return (
        GYM_SITE
        / "resources_servers"
        / "example_session_state_mgmt"
        / "configs"
        / "example_session_state_mgmt.yaml"
    )


def test_a_gym_config_yaml_and_instance_name_select_the_server(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    instance = "example_session_state_mgmt_resources_server"
    bridge: BridgeProcess = spawn_bridge(["--resources-server", f"{counter_config()}:{instance}"])
    upstream = bridge.health()["upstream"]
    assert upstream["server_name"] == instance
    assert upstream["server_class"].endswith(":StatefulCounterResourcesServer")
    assert bridge.seed(counter_row(11))["mcp"]["server_name"] == instance


def test_an_unknown_config_instance_names_the_instances_there() -> None:
    result = run_serve("--port", str(free_port()), "--resources-server", f"{counter_config()}:nope")
    assert result.returncode == 2
    assert (
        "has no resources_servers instance named nope (instances: example_session_state_mgmt_resources_server"
        in (result.stderr)
    )


def test_healthz_answers_from_the_bind_while_a_slow_upstream_boots(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    """Liveness must not wait for the upstream (a pod's liveness probe would restart it in a loop):
    /healthz is 200 within 1 s of the port listening, /readyz 503 with the reason until ready."""
    import socket

    from tests.fixtures.helpers import FAULT_SPEC, fault_env

    bridge = spawn_bridge(
        ["--resources-server", FAULT_SPEC], env=fault_env(FAULT_FIXTURE_BOOT_DELAY_S="6"), wait_ready=False
    )
    deadline = time.monotonic() + 60
    while True:  # the moment the port listens
        assert time.monotonic() < deadline, bridge.log()
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", bridge.port)) == 0:
                break
        time.sleep(0.01)
    listening = time.monotonic()
    while True:
        try:
            health = httpx.get(f"{bridge.url}/healthz", timeout=2)
            if health.status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() - listening < 5, bridge.log()
        time.sleep(0.01)
    assert time.monotonic() - listening < 1.0
    body = health.json()
    assert body["starting"] is True and body["upstream"]["ready"] is False and body["rest_auth"] == "none"
    ready = httpx.get(f"{bridge.url}/readyz", timeout=2)
    reason = ready.json()["reason"]
    assert ready.status_code == 503 and ("starting" in reason or FAULT_SPEC in reason), ready.text
    seed = httpx.post(f"{bridge.url}/seed_session", json=counter_row(0), timeout=5)
    assert (
        seed.status_code == 503 and seed.headers["retry-after"] == "2" and "starting" in seed.json()["detail"]
    )
    rpc = httpx.post(f"{bridge.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=5)
    assert rpc.status_code == 503 and "starting" in rpc.json()["error"]["message"]
    bridge.wait_ready(120)
    token = bridge.seed(counter_row(4))["mcp"]["headers"]["X-NeMo-Gym-Session-Token"]
    value = httpx.post(
        f"{bridge.url}/get_counter_value", json={}, headers={"X-NeMo-Gym-Session-Token": token}, timeout=10
    )
    assert value.json() == {"count": 4}
    assert bridge.health()["instance"] == body["instance"] and "starting" not in bridge.health()
