"""The bridge's Gym server entry and what it relies on, in pieces (the whole road, Gym's launcher and
collector, is ``tests/test_gym_launcher.py``):

* ``--listen-when-ready``: Gym's launcher counts any answer on the port as ready, so the port refuses
  connections until a seed can be served; a start that fails exits with its one-line reason.
* Where Gym finds the entry: nemo-gym 0.7.0's own resolver (``_resolve_server_dir``) on the checkout's
  ``resources_servers/gym_mcp_bridge``, on ``NEMO_GYM_EXTRA_ROOTS`` set to ``gym-mcp-bridge gym-entry
  --print-root``, and on a workspace ``gym-mcp-bridge gym-entry DIR`` wrote; and Gym's own venv setup
  command for it installs nemo-gym at the launcher's version (the bridge's upstream runs on that venv).
* ``app.py`` run as the launcher runs it (``NEMO_GYM_CONFIG_DICT`` / ``NEMO_GYM_CONFIG_PATH``): one-line
  errors, and the remote mode's watch of a bridge that is not there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from benchmarks.procs import free_port
from tests.fixtures.bridges import BRIDGE, ROOT, SECRET

ENTRY = ROOT / "resources_servers" / "gym_mcp_bridge"
APP = ENTRY / "app.py"


def test_listen_when_ready_refuses_until_a_seed_can_be_served(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    log = (tmp_path / "bridge.log").open("wb")
    proc = subprocess.Popen(
        [*BRIDGE, "serve", "--port", str(port), "--listen-when-ready"],
        cwd=ROOT,
        # the seeded session is left open: no session drain on the SIGTERM below
        env={**os.environ, "GYM_MCP_BRIDGE_SECRET": SECRET, "GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S": "0"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        refused = 0
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "bridge.log").read_text()
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx.ConnectError:
                refused += 1
                time.sleep(0.05)
        assert refused > 0  # the upstream takes seconds to boot: the port refused meanwhile
        assert answer.status_code == 404  # the first answer is the real app's, not "starting" (503)
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        seeded = httpx.post(
            f"http://127.0.0.1:{port}/seed_session",
            json={"responses_create_params": {"input": []}, "initial_count": 1},
            timeout=30,
        )
        assert seeded.status_code == 200 and seeded.json()["mcp"]["tool_names"], seeded.text
    finally:
        proc.terminate()
        proc.wait(30)


def test_listen_when_ready_start_failure_is_one_line_and_never_listens(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    proc = subprocess.Popen(
        [*BRIDGE, "serve", "--port", str(port), "--listen-when-ready", "--resources-server", "no_such_env"],
        cwd=ROOT,
        env={**os.environ, "GYM_MCP_BRIDGE_SECRET": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    answered = False
    while proc.poll() is None:
        with socket.socket() as sock:
            answered |= sock.connect_ex(("127.0.0.1", port)) == 0
        time.sleep(0.05)
    _, err = proc.communicate()
    assert proc.returncode == 2, err
    assert not answered
    # the reason in one line (the upstream's log tail follows it, indented)
    (reason,) = [line for line in err.splitlines() if line.startswith("gym-mcp-bridge: ")]
    assert "upstream no_such_env: no bundled Gym environment named 'no_such_env'" in reason, err
    assert "Traceback" not in err


def gym07(code: str, gym07_python: Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> Any:
    """Run ``code`` in nemo-gym 0.7.0's interpreter; it prints one JSON value."""
    result = subprocess.run(
        [str(gym07_python), "-c", code],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


RESOLVE = """
import json
from pathlib import Path
from omegaconf import OmegaConf
from nemo_gym.cli.env import _resolve_server_dir
from nemo_gym.cli.setup_command import setup_env_command
found = _resolve_server_dir(Path("resources_servers/gym_mcp_bridge"))
config = OmegaConf.create({"head_server_deps": ["ray[default]==0"], "uv_venv_dir": "/tmp/venvs",
                           "python_version": "3.13", "skip_venv_if_present": False})
print(json.dumps([str(found), (found / "app.py").is_file(), setup_env_command(found, config, "gym_mcp_bridge")]))
"""


def test_gyms_own_resolver_finds_the_entry_three_ways(gym07_python: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    # 1. from the checkout's root (the README's commands): the working directory
    found, has_app, setup = gym07(RESOLVE, gym07_python)
    assert Path(found) == ENTRY and has_app
    # Gym installs nemo-gym at its own version into the entry's venv: not an editable checkout install
    assert "nemo-gym==0.7.0" in setup, setup

    # 2. from anywhere, with NEMO_GYM_EXTRA_ROOTS as `gym-mcp-bridge gym-entry --print-root` prints it
    printed = subprocess.run(
        [*BRIDGE, "gym-entry", "--print-root"], capture_output=True, text=True, check=True
    ).stdout.strip()
    found, has_app, setup = gym07(RESOLVE, gym07_python, {"NEMO_GYM_EXTRA_ROOTS": printed}, cwd=elsewhere)
    assert Path(found).resolve() == (ENTRY / "app.py").resolve().parent and has_app
    assert "nemo-gym==0.7.0" in setup

    # 3. a Gym workspace the command wrote the entry into, naming this installation's bridge
    workspace = tmp_path / "workspace"
    wrote = subprocess.run([*BRIDGE, "gym-entry", str(workspace)], capture_output=True, text=True, check=True)
    assert "resources_servers/gym_mcp_bridge" in wrote.stdout
    found, has_app, _ = gym07(RESOLVE, gym07_python, cwd=workspace)
    assert Path(found) == workspace / "resources_servers" / "gym_mcp_bridge" and has_app
    command = Path(
        (workspace / "resources_servers" / "gym_mcp_bridge" / "bridge_command").read_text().strip()
    )
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("gym-mcp-bridge ")
    assert (Path(found) / "app.py").read_bytes() == APP.read_bytes()


def run_app(
    gym07_python: Path, config: dict[str, Any] | None, instance: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NEMO_GYM_CONFIG_PATH": instance}
    env.pop("NEMO_GYM_CONFIG_DICT", None)
    if config is not None:
        env["NEMO_GYM_CONFIG_DICT"] = yaml.safe_dump(config)
    return subprocess.run(
        [str(gym07_python), str(APP)], cwd=ENTRY, env=env, capture_output=True, text=True, timeout=timeout
    )


def block(**keys: Any) -> dict[str, Any]:
    return {"bridge": {"resources_servers": {"gym_mcp_bridge": {"entrypoint": "app.py", **keys}}}}


def test_app_errors_are_one_line(gym07_python: Path) -> None:
    for config, expected in (
        (None, "no resources_servers block for instance 'bridge'"),
        ({"other": {}}, "no resources_servers block for instance 'bridge'"),
        (block(), "instance 'bridge' has no host/port"),
        (
            block(host="127.0.0.1", port=1, bridge_command="/nonexistent/gym-mcp-bridge"),
            "is not an executable",
        ),
        (block(host="127.0.0.1", port=1, bridge="x"), "`bridge` must be a mapping"),
    ):
        result = run_app(gym07_python, config, "bridge")
        assert result.returncode == 2, result
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("gym_mcp_bridge: "), result.stderr
        assert expected in result.stderr, result.stderr


def test_remote_mode_serves_nothing_and_says_when_the_bridge_is_unreachable(gym07_python: Path) -> None:
    port = free_port("127.0.0.1")
    config = block(host="127.0.0.1", port=port, bridge_url=f"http://127.0.0.1:{port}", watch_interval_s=0.2)
    env = {**os.environ, "NEMO_GYM_CONFIG_PATH": "bridge", "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(config)}
    proc = subprocess.Popen(
        [str(gym07_python), str(APP)], cwd=ENTRY, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(3)
        assert proc.poll() is None  # it stays up for the launcher
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0  # and serves nothing
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    lines = err.strip().splitlines()
    assert (
        lines[0]
        == f"gym_mcp_bridge: bridge is the remote bridge at http://127.0.0.1:{port}; nothing is served here"
    )
    assert lines[1].startswith(f"gym_mcp_bridge: remote bridge http://127.0.0.1:{port} unreachable: ")
    assert len(lines) == 2  # said once, not on every check
    assert proc.returncode == 0


PARSE = """
import json, sys, yaml
from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig
from omegaconf import OmegaConf
given = yaml.safe_load(sys.stdin.read())
parsed = GlobalConfigDictParser().parse(GlobalConfigDictParserConfig(
    initial_global_config_dict=OmegaConf.create(given), skip_load_from_cli=True, skip_load_from_dotenv=True))
block = OmegaConf.to_container(parsed["gym_mcp_bridge"]["resources_servers"]["gym_mcp_bridge"], resolve=True)
print(json.dumps(block))
"""


def docs_gym_blocks() -> list[dict[str, Any]]:
    """The ``gym_mcp_bridge`` instances docs/clients.md gives in its launcher section."""
    text = (ROOT / "docs" / "clients.md").read_text()
    section = text[
        text.index("## With Gym's own launcher") : text.index("### Measured on the launcher's road")
    ]
    blocks = [yaml.safe_load(part.split("```")[0]) for part in section.split("```yaml\n")[1:]]
    return [block for block in blocks if "gym_mcp_bridge" in block]


def test_the_configs_the_docs_give_are_accepted_by_gyms_parser_and_the_entry(gym07_python: Path) -> None:
    """Each instance block of the docs (local, Compose, Kubernetes), with an agent naming it, through
    nemo-gym 0.7.0's own config parser (what the launcher runs first); the Compose one through the
    entry as the launcher starts it: remote mode, nothing served."""
    blocks = docs_gym_blocks()
    assert len(blocks) == 3
    agent = {
        "simple_agent": {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": "gym_mcp_bridge"},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            }
        },
        "policy_model": {
            "responses_api_models": {"openai_model": {"entrypoint": "app.py", "openai_model": "m"}}
        },
    }
    remote = 0
    for given in blocks:
        result = subprocess.run(
            [str(gym07_python), "-c", PARSE],
            input=yaml.safe_dump({**given, **agent}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        parsed = json.loads(result.stdout.strip().splitlines()[-1])
        original = given["gym_mcp_bridge"]["resources_servers"]["gym_mcp_bridge"]
        assert {key: parsed[key] for key in original} == original
        remote += "bridge_url" in original
        # the entry run on the loopback one only: the cluster's DNS name is not to be looked up from here
        if "bridge_url" in original and original["host"] == "127.0.0.1":
            config = {"gym_mcp_bridge": {"resources_servers": {"gym_mcp_bridge": parsed}}}
            env = {
                **os.environ,
                "NEMO_GYM_CONFIG_PATH": "gym_mcp_bridge",
                "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(config),
            }
            proc = subprocess.Popen(
                [str(gym07_python), str(APP)], cwd=ENTRY, env=env, stderr=subprocess.PIPE, text=True
            )
            time.sleep(2)
            assert proc.poll() is None
            proc.terminate()
            first = proc.communicate(timeout=10)[1].splitlines()[0]
            assert (
                first
                == f"gym_mcp_bridge: gym_mcp_bridge is the remote bridge at {original['bridge_url']}; nothing is served here"
            )
    assert remote == 2
