"""Gym's own harness agents wired to the bridge, by Gym's own code in the Gym interpreter.

nemo-gym's ``claude_code_agent`` (in the installed 0.4.0) and ``codex_agent`` (first shipped
after 0.4.0; its source comes from the pinned later wheel below, fetched with pip from PyPI into
``.cache/gym-wheels``) read the ``mcp`` block of a ``/seed_session`` answer and build
``<resources_server_base_url> + url_path`` plus the session headers. ``tests/interop/
gym_agent_wiring.py`` runs that code against a real seed answer from the bridge, with Gym's
global config naming the bridge as the resources server. This test then proves the entries work:
the URL is the bridge's ``/mcp``, the headers authenticate the seeded session (values exact), and
``CodexAgent._create_response`` really drives the Codex CLI through them to the row's reward.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import GYM_PYTHON, HEADER, ROOT, BridgeProcess, gym_data, mcp_client
from tests.interop.node import ensure_packages
from tests.test_clients_codex import StubResponsesProvider, counter_solution

pytestmark = pytest.mark.anyio

WIRING = ROOT / "tests" / "interop" / "gym_agent_wiring.py"
CODEX_AGENT_GYM_VERSION = "0.7.0"  # the first nemo-gym on PyPI checked here that ships codex_agent
WHEELS = ROOT / ".cache" / "gym-wheels"


def codex_agent_source(version: str = CODEX_AGENT_GYM_VERSION) -> Path:
    """``responses_api_agents/codex_agent`` from the nemo-gym wheel, unpacked under ``.cache/``."""
    target = WHEELS / f"nemo_gym-{version}-src"
    marker = target / "responses_api_agents" / "codex_agent" / "app.py"
    if marker.exists():
        return target
    WHEELS.mkdir(parents=True, exist_ok=True)
    wheel = next(WHEELS.glob(f"nemo_gym-{version}-*.whl"), None)
    if wheel is None:
        # the wheel needs Python >= 3.13 to install; only its source is read here
        pip = [sys.executable, "-m", "pip"]
        if subprocess.run([*pip, "--version"], capture_output=True).returncode != 0:
            found = shutil.which("python3") or shutil.which("pip3")
            assert found, "no pip available to download the nemo-gym wheel"
            pip = [found, "-m", "pip"] if found.endswith("python3") else [found]
        result = subprocess.run(
            [*pip, "download", "-q", "--no-deps", "--ignore-requires-python", "--python-version", "3.13",
             "--only-binary=:all:", f"nemo-gym=={version}", "-d", str(WHEELS)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        wheel = next(WHEELS.glob(f"nemo_gym-{version}-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("responses_api_agents/codex_agent/"):
                archive.extract(name, target)
    return target


def run_wiring(plan: dict[str, Any]) -> dict[str, Any]:
    assert GYM_PYTHON.exists(), "the Gym environment is missing: run 'make setup'"
    result = subprocess.run(
        [str(GYM_PYTHON), str(WIRING), json.dumps(plan)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


async def test_gym_claude_code_and_codex_agents_build_working_entries(counter_bridge: BridgeProcess) -> None:
    codex = ensure_packages("codex")
    row = gym_data("example_session_state_mgmt")[0]  # 3 -> 6
    seed = counter_bridge.seed(row)
    token = seed["mcp"]["headers"][HEADER]
    host, port = counter_bridge.host, counter_bridge.port

    with StubResponsesProvider(counter_solution(row)) as stub:
        out = run_wiring(
            {
                "seed": seed,
                "resources_host": host,
                "resources_port": port,
                "codex_agent_src": str(codex_agent_source()),
                "model_base_url": stub.base_url,
                "row": row,
                "codex_bin_dir": str(codex.bin("codex").parent),
            }
        )
    assert out["nemo_gym_version"] == "0.4.0"

    # claude_code_agent: the --mcp-config file it hands to `claude`
    claude = out["claude_code_agent"]
    assert claude["resources_server_base_url"] == counter_bridge.url
    entry = claude["mcp_config"]["mcpServers"]["example_session_state_mgmt"]
    assert entry == {"type": "http", "url": f"{counter_bridge.url}/mcp", "headers": {HEADER: token}}

    # codex_agent: the [mcp_servers.<name>] table of its config.toml
    codex_out = out["codex_agent"]
    assert codex_out["source"].endswith("responses_api_agents/codex_agent/app.py")
    table = codex_out["mcp_servers"]["example_session_state_mgmt"]
    assert table == {"url": f"{counter_bridge.url}/mcp", "http_headers": {HEADER: token}}
    assert (
        f'[mcp_servers.example_session_state_mgmt]\nurl = "{counter_bridge.url}/mcp"'
        in codex_out["config_toml"]
    )

    # CodexAgent._create_response ran the real Codex CLI through that entry: the calls reached this
    # session (3 + 3 = 6), and the response Gym's parse_exec_jsonl built scores the row's reward
    assert [(i.get("namespace"), i["name"]) for i in stub.emitted] == [
        ("mcp__example_session_state_mgmt", "increment_counter"),
        ("mcp__example_session_state_mgmt", "get_counter_value"),
    ]
    assert stub.function_outputs() == [{"success": True}, {"count": 6}]
    response = codex_out["response"]
    assert [i["name"] for i in response["output"] if i["type"] == "function_call"] == [
        "increment_counter",
        "get_counter_value",
    ]
    verified = httpx.post(
        f"{counter_bridge.url}/verify",
        json={**row, "response": response},
        headers={HEADER: token},
        timeout=60,
    ).json()
    assert verified["reward"] == 1.0
    assert verified["_bridge"]["recorded_tool_calls"] == 2
    assert verified["_bridge"]["normalized"] == {}  # Gym's converter already emits bare names

    # both entries authenticate with the MCP SDK client too: same session, exact value
    for url, headers in ((entry["url"], entry["headers"]), (table["url"], table["http_headers"])):
        async with mcp_client(url, headers[HEADER]) as client:
            value = await client.call_tool("get_counter_value", {})
        assert value.structured_content == {"count": 6}


async def test_gym_claude_code_entry_without_the_bridge_headers_is_refused(
    counter_bridge: BridgeProcess,
) -> None:
    """What Gym's agents warn about ("no headers ... will reject the calls") is what happens."""
    seed = counter_bridge.seed(gym_data("example_session_state_mgmt")[0])
    del seed["mcp"]["headers"]
    out = run_wiring(
        {
            "seed": seed,
            "resources_host": counter_bridge.host,
            "resources_port": counter_bridge.port,
            "model_base_url": "http://127.0.0.1:9/v1",
        }
    )
    entry = out["claude_code_agent"]["mcp_config"]["mcpServers"]["example_session_state_mgmt"]
    assert "headers" not in entry
    async with mcp_client(entry["url"]) as client:
        refused = await client.call_tool("get_counter_value", {})
    assert refused.is_error
    assert "missing session token" in refused.content[0].text  # type: ignore[union-attr]
