"""A fast subset of the compatibility sweep (``make sweep``, ``benchmarks/sweep.py``), on real Gym envs.

- ``example_mcp_weather``: an MCP-native upstream (Gym 0.4.0's ``MCPResourcesServer``): tools found
  through its own ``/mcp``, calls forwarded with its own session token, rewards equal native;
- ``calendar``: its own ``requirements.txt`` (an environment built on first use, with a progress
  line) and ``from utils import ...`` relative to its own directory;
- ``circle_click``: arguments reach the upstream as the model sent them, and the model reads the
  upstream's own answer (no bridge-side schema refusal).

Plus the pieces without a bridge: config resolution and working directory in the boot script, the
requirement filter, and the one-line install error.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks import sweep
from bridge import gym_envs
from tests.conftest import BOOT, GYM_PYTHON, GYM_SITE, HEADER, BridgeProcess, gym_data, mcp_client

pytestmark = pytest.mark.anyio


async def _parity(bridge: BridgeProcess, env: str) -> sweep.EnvResult:
    result = sweep.EnvResult(env, started=True)
    await sweep.score(bridge.url, env, result)
    return result


async def test_mcp_native_upstream_scores_as_natively(spawn_bridge: Any) -> None:
    bridge = spawn_bridge(["--resources-server", "example_mcp_weather"])
    result = await _parity(bridge, "example_mcp_weather")
    assert result.tools == 1 and result.rollouts == 5
    assert (result.native_scored, result.parity) == (5, 5), result.mismatches
    # the caller gets the bridge's own token and metadata, never the upstream's
    seeded = bridge.seed(gym_data("example_mcp_weather")[0])
    assert seeded["mcp"]["url"] == f"{bridge.url}/mcp" and seeded["mcp"]["tool_names"] == ["get_weather"]
    token = seeded["mcp"]["headers"][HEADER]
    assert token.count(".") == 2  # a JWT, not itsdangerous' value
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        listed = await client.list_tools()
        called = await client.call_tool("get_weather", {"city": "Paris"})
    assert [t.name for t in listed.tools] == ["get_weather"]
    assert "city" in listed.tools[0].input_schema["properties"]
    assert not called.is_error and called.content[0].text == "The weather in Paris is sunny and 72 F."  # type: ignore[union-attr]


async def test_own_requirements_and_own_directory(spawn_bridge: Any, tmp_path: Path) -> None:
    cache = tmp_path / "gym-envs"
    bridge = spawn_bridge(["--resources-server", "calendar"], env={"GYM_MCP_BRIDGE_GYM_ENVS_DIR": str(cache)})
    assert "building the environment of calendar" in bridge.log()
    assert "built the environment of calendar" in bridge.log()
    built = [d for d in cache.iterdir() if d.is_dir()]
    assert len(built) == 1 and built[0].name.startswith("calendar-")
    assert (built[0] / gym_envs.COMPLETE_MARKER).is_file()
    assert bridge.health()["upstream"]["pid"] is not None
    result = await _parity(bridge, "calendar")
    assert result.rollouts == 5 and (result.native_scored, result.parity) == (5, 5), result.mismatches
    bridge.stop()
    again = spawn_bridge(["--resources-server", "calendar"], env={"GYM_MCP_BRIDGE_GYM_ENVS_DIR": str(cache)})
    assert "building the environment" not in again.log()  # reused


async def test_arguments_reach_the_upstream_as_sent(spawn_bridge: Any) -> None:
    bridge = spawn_bridge(["--resources-server", "circle_click"])
    row = gym_data("circle_click")[0]
    arguments = {"x": [637, 669], "y": "456"}  # against the row's schema; Gym's server answers anyway
    upstream = bridge.health()["upstream"]["url"]
    with httpx.Client(base_url=upstream, timeout=60) as native:
        native.post("/seed_session", json=row).raise_for_status()
        natively = native.post("/click", json=arguments)
    token = bridge.seed(row)["mcp"]["headers"][HEADER]
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        bridged = await client.call_tool("click", arguments)
    assert bridged.content[0].text == natively.text  # type: ignore[union-attr]
    assert bridged.is_error is (natively.status_code >= 400)
    result = await _parity(bridge, "circle_click")
    assert (result.native_scored, result.parity) == (result.rollouts, result.rollouts), result.mismatches


def _boot_resolve(spec: str, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    script = (
        "import json, os, sys\n"
        f"sys.path.insert(0, {str(BOOT.parent)!r})\n"
        "import upstream_boot\n"
        "r = upstream_boot.resolve(sys.argv[1], None)\n"
        "print(json.dumps({'config': r.config, 'cwd': os.getcwd(), 'name': r.name,"
        " 'pythonpath': os.environ['PYTHONPATH'], 'cls': r.cls.__name__}))\n"
    )
    done = subprocess.run(
        [str(GYM_PYTHON), "-c", script, spec],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_config_is_resolved_and_the_server_runs_in_its_directory(tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text(
        "counter:\n"
        "  resources_servers:\n"
        "    example_session_state_mgmt:\n"
        "      entrypoint: app.py\n"
        "      domain: ${oc.env:COMPAT_TEST_DOMAIN,other}\n"
        "      description: ${shared_text}\n"
        "shared_text: from the top level\n"
    )
    found = _boot_resolve(f"{config}:counter", tmp_path, {"COMPAT_TEST_DOMAIN": "agent"})
    assert found["config"]["domain"] == "agent" and found["config"]["description"] == "from the top level"
    assert found["name"] == "counter" and found["cls"] == "StatefulCounterResourcesServer"
    assert GYM_SITE is not None
    env_dir = GYM_SITE / "resources_servers" / "example_session_state_mgmt"
    assert found["cwd"] == str(env_dir) and found["pythonpath"].split(os.pathsep)[0] == str(env_dir)


def test_missing_config_value_is_one_line_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(GYM_PYTHON), str(BOOT), "--server", "browsecomp_advanced_harness"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("upstream_boot: ") and "'tavily_api_key'" in last and "env.yaml" in last


def test_requirements_as_gym_installs_them(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        "-e nemo-gym[dev] @ ../../\n# a comment\n\nxmltodict==1.0.2  # pinned\npyyaml>=6.0\n-e ../..\n"
    )
    assert gym_envs.requirement_lines(tmp_path) == ["xmltodict==1.0.2", "pyyaml>=6.0"]
    assert gym_envs.requirement_lines(tmp_path / "nowhere") == []


def test_install_failure_is_one_line_naming_the_package() -> None:
    unresolvable = (
        "Using Python 3.12.1 environment at: /x\n"
        "  \u00d7 No solution found when resolving dependencies:\n"
        "  ╰─▶ Because there is no version of torch==9.12.0 and you require torch==9.12.0, we can conclude "
        "that your requirements are unsatisfiable.\n"
    )
    line = gym_envs.failed_package(["numpy>=1.26", "torch==9.12.0"], unresolvable)
    assert line.startswith("cannot install 'torch==9.12.0'") and "\n" not in line
    offline = (
        "error: Failed to download and build `tale-suite @ git+https://github.com/microsoft/tale-suite.git`\n"
        "  Caused by: Git operation failed\n"
        "         fatal: unable to access 'https://github.com/microsoft/tale-suite.git/': Could not resolve host: github.com\n"
    )
    lines = ["git+https://github.com/microsoft/tale-suite.git@train_test_splits#egg=tale-suite"]
    line = gym_envs.failed_package(lines, offline)
    assert "tale-suite" in line and "Could not resolve host: github.com" in line and "\n" not in line
