"""examples/quickstart.py as a user runs it (a child process), against a real bridge like `make run`'s
and one that requires an API key: reward 1.0, and every failure one line saying what to do.

Expected values: the README's quickstart transcript (the counter row: 3 + 1 + 2 = 6, reward 1.0)
and the failures a user meets (no bridge at the URL, key required, key wrong, not ready yet).
The compose deployment's own key discovery is walked in tests/test_compose.py.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.bridges import ROOT, BridgeProcess, free_port

QUICKSTART = ROOT / "examples" / "quickstart.py"
KEY = "quickstart-test-key-" + "q" * 40


def quickstart(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GYM_MCP_BRIDGE_")}
    clean["PATH"] = os.path.dirname(sys.executable)  # no docker here: the compose lookup finds nothing
    return subprocess.run(
        [sys.executable, str(QUICKSTART), *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line_failure(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line and line.startswith("quickstart: "), proc.stderr
    return line


def test_quickstart_against_make_run_reaches_reward_1(counter_bridge: BridgeProcess) -> None:
    done = quickstart("--url", counter_bridge.url)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("seeded a session on example_session_state_mgmt; MCP endpoint ")
    assert "get_counter_value() -> " in done.stdout and '"count":6' in done.stdout.replace(" ", "")
    assert lines[-1] == "reward: 1.0"


def test_no_bridge_at_the_url_is_one_line() -> None:
    line = one_line_failure(quickstart("--url", f"http://127.0.0.1:{free_port()}"))
    assert "no bridge answers at" in line and "make run" in line


@pytest.fixture(scope="module")
def keyed_bridge(log_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> BridgeProcess:
    key_file = tmp_path_factory.mktemp("key") / "api_key"
    key_file.write_text(KEY + "\n")
    bridge = BridgeProcess(args=[], env={"GYM_MCP_BRIDGE_API_KEY_FILE": str(key_file)}).start(log_dir)
    yield bridge  # type: ignore[misc]
    bridge.stop()


def test_the_key_from_flag_env_or_file_reaches_reward_1(keyed_bridge: BridgeProcess, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    for args, env in (
        (["--api-key", KEY], {}),
        ([], {"GYM_MCP_BRIDGE_API_KEY": KEY}),
        (["--api-key-file", str(key_file)], {}),
        ([], {"GYM_MCP_BRIDGE_API_KEY_FILE": str(key_file)}),
    ):
        done = quickstart("--url", keyed_bridge.url, *args, env=env)
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == "reward: 1.0", (args, done.stderr)


def test_a_missing_or_wrong_key_is_one_line(keyed_bridge: BridgeProcess) -> None:
    line = one_line_failure(quickstart("--url", keyed_bridge.url))
    assert "requires an API key" in line and "--api-key" in line and "show-config" in line
    line = one_line_failure(
        quickstart("--url", keyed_bridge.url, env={"GYM_MCP_BRIDGE_API_KEY": "wrong-" * 8})
    )
    assert "refused the API key from GYM_MCP_BRIDGE_API_KEY" in line


def test_a_bridge_not_ready_yet_is_one_line_with_the_reason(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    """A bridge whose upstream does not answer yet (external mode, nothing on that port): /readyz
    says why, and the quickstart passes that on."""
    upstream = f"http://127.0.0.1:{free_port()}"
    bridge: BridgeProcess = spawn_bridge(
        ["--upstream-url", upstream, "--startup-timeout-s", "120"], wait_ready=False
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the port is bound; the upstream never answers
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{bridge.url}/healthz", timeout=2).status_code == 200:
                break
        time.sleep(0.1)
    line = one_line_failure(quickstart("--url", bridge.url))
    assert "is not ready yet: " in line and "retry" in line, line
    assert upstream.removeprefix("http://") in line, line
