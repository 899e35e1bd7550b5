"""What a newcomer meets when something is set up wrong: each mistake is one line that names the fix.

- ``show-config`` reports the running bridge's own key and token settings (its ``/healthz``), says on
  its first line whose settings it shows, and checks the key it knows against that bridge; with no
  bridge answering, this shell's settings;
- ``client-config`` on a 401 names its own ``--api-key`` and ``GYM_MCP_BRIDGE_API_KEY``;
- a misspelled ``--resources-server`` gets the close matches at once; ``--upstream-url`` beside a
  managed-mode setting is refused naming both; an upstream URL that does not answer is logged at once
  and while it stays so (throttled), and ``/healthz`` says "waiting for upstream" with the reason;
- ``serve --help`` describes the command;
- the quickstart refuses a bridge serving another environment than the counter it plays;
- ``run_codex.py`` under a Python without the bridge says how to run it;
- (marker ``evaluator``) ``examples/evaluator/evaluate.py`` exits 2 naming the cause when no row could
  be scored because the bridge is unreachable or refused the key: no mean reward, no traceback, no key.

Expected values come from outside the code under test: the bridge's 401 as a client meets it, the
environments Gym bundles (its ``resources_servers`` folder), the counter's tool names.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.settings import Settings
from bridge.upstream import process
from bridge.upstream.process import Upstream, UpstreamStartError
from tests.fixtures.bridges import BRIDGE, GYM_PYTHON, ROOT, SECRET, BridgeProcess, free_port, running_bridge

KEY = "newcomer-test-key-" + "n" * 40
GYM_SERVERS = GYM_PYTHON.parent.parent / "lib"


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``gym-mcp-bridge ARGS`` from a shell that has none of the bridge's settings but ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GYM_MCP_BRIDGE_")}
    return subprocess.run(
        [*BRIDGE, *args],
        cwd=ROOT,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(done: subprocess.CompletedProcess[str], prefix: str = "gym-mcp-bridge") -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def keyed(log_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """The default environment behind a REST API key, started from a key file (as the docs do)."""
    key_file = tmp_path_factory.mktemp("newcomer") / "api-key"
    key_file.write_text(KEY)
    with running_bridge(log_dir, "--api-key-file", str(key_file), timeout=120) as bridge:
        yield bridge


# -- show-config -------------------------------------------------------------------------------------


def test_show_config_reports_the_running_bridge_and_checks_the_key_known_here(keyed: BridgeProcess) -> None:
    refused = httpx.post(f"{keyed.url}/seed_session", json={}, timeout=10)
    assert refused.status_code == 401  # what a client meets: the bridge requires its key

    bare = cli("show-config", "--bridge-url", keyed.url)  # a shell without the bridge's environment
    assert bare.returncode == 0, bare.stdout + bare.stderr
    lines = bare.stdout.splitlines()
    assert lines[0] == f"reporting: the running bridge at {keyed.url} (its /healthz)", bare.stdout
    assert "API key:   required by this bridge, not known to this shell" in bare.stdout, bare.stdout
    assert "open to whoever reaches the port" not in bare.stdout
    assert any(
        line.startswith("tokens:    signing key from the secret setting") and "lifetime 3600s" in line
        for line in lines
    ), bare.stdout

    known = cli("show-config", env={"GYM_MCP_BRIDGE_URL": keyed.url, "GYM_MCP_BRIDGE_API_KEY": KEY})
    assert f"API key:   {KEY}" in known.stdout and "REFUSED" not in known.stdout, known.stdout
    shown = json.loads(
        cli(
            "show-config", "--json", env={"GYM_MCP_BRIDGE_URL": keyed.url, "GYM_MCP_BRIDGE_API_KEY": KEY}
        ).stdout
    )
    assert (shown["reported"], shown["rest_auth"], shown["api_key_accepted"]) == (
        "running bridge",
        "api_key",
        True,
    )
    assert shown["mcp_url"] == f"{keyed.url}/mcp"

    wrong = cli("show-config", "--bridge-url", keyed.url, env={"GYM_MCP_BRIDGE_API_KEY": "w" * 40})
    assert "REFUSED by this bridge" in wrong.stdout, wrong.stdout


def test_show_config_with_no_bridge_answering_says_it_shows_this_shells_settings() -> None:
    port = free_port()
    done = cli("show-config", env={"GYM_MCP_BRIDGE_PORT": str(port), "GYM_MCP_BRIDGE_API_KEY": KEY})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        f"reporting: this shell's GYM_MCP_BRIDGE_* settings (no bridge answers at http://127.0.0.1:{port})"
    )
    assert f"API key:   {KEY}" in lines and not any(line.startswith("tokens:") for line in lines)


# -- client-config -----------------------------------------------------------------------------------


def test_client_config_on_a_401_names_its_own_api_key(keyed: BridgeProcess) -> None:
    done = cli("client-config", "--client", "json", "--bridge-url", keyed.url)
    assert done.returncode == 2
    line = one_line(done)
    assert "HTTP 401" in line and "pass --api-key KEY or set GYM_MCP_BRIDGE_API_KEY" in line, line
    wrong = cli("client-config", "--client", "json", "--bridge-url", keyed.url, "--api-key", "w" * 40)
    assert wrong.returncode == 2
    assert "the key given (--api-key / GYM_MCP_BRIDGE_API_KEY) is not this bridge's" in one_line(wrong)
    assert "w" * 40 not in wrong.stderr


# -- serve: names, conflicts, an upstream that does not answer, --help ----------------------------------


def test_a_misspelled_environment_name_gets_the_close_matches_at_once() -> None:
    bundled = {p.parent.name for p in GYM_SERVERS.glob("python3.*/site-packages/resources_servers/*/app.py")}
    assert "workplace_assistant" in bundled and "workplace_assistent" not in bundled
    started = time.monotonic()
    done = cli("serve", "--port", str(free_port()), "--resources-server", "workplace_assistent")
    assert done.returncode == 2
    line = one_line(done, "gym-mcp-bridge:")
    assert "no bundled Gym environment named 'workplace_assistent'; did you mean workplace_assistant?" in line
    assert time.monotonic() - started < 30, "refused before any server is started"


@pytest.mark.parametrize(
    ("args", "env", "other"),
    [
        (
            ["--resources-server", "workplace_assistant"],
            {},
            "--resources-server / GYM_MCP_BRIDGE_RESOURCES_SERVER",
        ),
        ([], {"GYM_MCP_BRIDGE_UPSTREAM_PORT": "9100"}, "--upstream-port / GYM_MCP_BRIDGE_UPSTREAM_PORT"),
        (["--gym-envs-dir", "/tmp/envs"], {}, "--gym-envs-dir / GYM_MCP_BRIDGE_GYM_ENVS_DIR"),
        (["--no-restart-upstream"], {}, "--restart-upstream / GYM_MCP_BRIDGE_RESTART_UPSTREAM"),
    ],
)
def test_upstream_url_beside_a_managed_mode_setting_is_refused_naming_both(
    args: list[str], env: dict[str, str], other: str
) -> None:
    done = cli("serve", "--port", str(free_port()), "--upstream-url", "http://127.0.0.1:9", *args, env=env)
    assert done.returncode == 2
    line = one_line(done, "gym-mcp-bridge:")
    assert "--upstream-url / GYM_MCP_BRIDGE_UPSTREAM_URL" in line and other in line, line


def test_an_upstream_url_that_does_not_answer_is_logged_and_shown_in_healthz(spawn_bridge: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    bridge = spawn_bridge(["--upstream-url", dead, "--startup-timeout-s", "120"], wait_ready=False)
    deadline = time.monotonic() + 30
    health: dict[str, Any] = {}
    while time.monotonic() < deadline and "waiting" not in health.get("upstream", {}):
        try:
            health = bridge.health()
        except httpx.HTTPError:
            time.sleep(0.1)
    assert health.get("status") == "waiting for upstream", health
    assert health["upstream"]["waiting"].startswith(f"waiting for upstream {dead}: "), health
    assert "refused" in health["upstream"]["waiting"].lower(), health
    while time.monotonic() < deadline and f"waiting for upstream {dead}" not in bridge.log():
        time.sleep(0.1)
    assert f"WARNING gym_mcp_bridge.upstream: waiting for upstream {dead}: " in bridge.log(), bridge.log()


@pytest.mark.anyio
async def test_waiting_for_an_upstream_is_logged_while_it_lasts_and_throttled(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Polled four times a second, logged once per interval (here 0.4 s): the first failure at once."""
    monkeypatch.setattr(process, "_WAITING_LINE_S", 0.4)
    dead = f"http://127.0.0.1:{free_port()}"
    upstream = Upstream(
        Settings.model_validate({"upstream_url": dead, "startup_timeout_s": 1.5, "secret": SECRET})
    )
    caplog.set_level(logging.INFO, logger="gym_mcp_bridge.upstream")
    started = time.time()  # the records' clock
    try:
        with pytest.raises(UpstreamStartError, match=r"did not answer within 1\.5s"):
            await upstream._wait_external()
    finally:
        await upstream.stop()
    lines = [r for r in caplog.records if r.getMessage().startswith(f"waiting for upstream {dead}: ")]
    assert 3 <= len(lines) <= 5, [r.getMessage() for r in lines]  # 1.5 s / 0.4 s, not one per poll
    assert lines[0].created - started < 0.3, "the first failure is logged at once"


def test_serve_help_describes_the_command() -> None:
    done = cli("serve", "--help")
    description = done.stdout.split("\n\n", 1)[1].split("options:", 1)[0]
    assert "Serve a NeMo Gym resources server over MCP" in description, done.stdout
    assert "--upstream-url" in description and "docs/reference.md" in description


# -- the examples -------------------------------------------------------------------------------------


def test_the_quickstart_refuses_another_environment_naming_the_fix(workplace_bridge: BridgeProcess) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GYM_MCP_BRIDGE_")}
    clean["PATH"] = os.path.dirname(sys.executable)  # no docker: no compose key lookup
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--url", workplace_bridge.url],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith("quickstart: "), done.stderr
    assert "serves workplace_assistant, but this quickstart plays the counter environment" in line, line
    assert "(example_session_state_mgmt)" in line and "`make run` (no ARGS)" in line, line


def test_run_codex_needs_the_bridges_python_and_says_so() -> None:
    script = ROOT / "examples" / "clients" / "codex" / "run_codex.py"
    bare = subprocess.run(
        [str(GYM_PYTHON), "-I", str(script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert bare.returncode == 1 and "Traceback" not in bare.stderr, bare.stderr
    assert bare.stderr.strip() == (
        "run_codex.py: needs the bridge's environment: run it as .venv/bin/python "
        "examples/clients/codex/run_codex.py from the project root (after make setup)"
    )
    documented = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "examples/clients/codex/run_codex.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert documented.returncode == 0 and "--bridge-url" in documented.stdout, documented.stderr


# -- NeMo Evaluator ----------------------------------------------------------------------------------


@pytest.mark.evaluator
def test_evaluate_exits_2_naming_the_cause_when_no_row_could_be_scored(keyed: BridgeProcess) -> None:
    setup = subprocess.run(
        [str(ROOT / "scripts" / "setup-evaluator-env.sh")], capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stderr[-3000:]
    python = ROOT / ".cache" / "evaluator-env" / "bin" / "python"
    rows = next(
        GYM_SERVERS.glob("python3.*/site-packages/resources_servers/math_proof_judgement/data/example.jsonl")
    )
    dead = free_port()

    def evaluate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "examples/evaluator/evaluate.py", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    unreachable = evaluate("--resources-url", f"http://eval:{KEY}@localhost:{dead}", "--data", str(rows))
    refused = evaluate(
        "--resources-url", f"http://eval:{'w' * 40}@localhost:{keyed.port}", "--data", str(rows)
    )
    listing = evaluate("--resources-url", f"http://eval:{KEY}@localhost:{dead}", "--list-tools")
    for done, cause in (
        (unreachable, f"evaluate.py: no row was scored: no bridge answered at http://***@localhost:{dead} ("),
        (
            refused,
            f"evaluate.py: no row was scored: the bridge at http://***@localhost:{keyed.port} refused every row (401)",
        ),
        (
            listing,
            f"evaluate.py: ToolInfraError: Failed to fetch OpenAPI spec from http://***@localhost:{dead}",
        ),
    ):
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith(cause), done.stderr
        assert "mean_reward" not in done.stdout and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert KEY not in done.stdout + done.stderr and "w" * 40 not in done.stdout + done.stderr
    assert [json.loads(line)["reward"] for line in unreachable.stdout.splitlines()] == [None] * 5
