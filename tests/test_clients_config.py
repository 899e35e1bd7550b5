"""``gym-mcp-bridge client-config``: every client's configuration connects to a fresh session.

Each output is parsed the way its client parses it (TOML, a shell command line, JSON, Python),
and the URL and headers found in it are used with the official MCP SDK client: the session they
name must hold exactly the seeded row's state.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bridge.commands import client_config
from bridge.commands.cli import main as cli_main
from tests.fixtures.bridges import BRIDGE, HEADER, ROOT, BridgeProcess, counter_row, gym_data, mcp_client

pytestmark = pytest.mark.anyio


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``gym-mcp-bridge client-config ARGS`` through the CLI's own ``main``, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(["client-config", *args])
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_the_installed_command_prints_a_config(counter_bridge: BridgeProcess) -> None:
    """The same through ``python -m bridge`` in a child process, as a user runs it."""
    out = subprocess.run(
        [*BRIDGE, "client-config", "--client", "codex", "--bridge-url", counter_bridge.url,
         "--row-json", json.dumps(counter_row(5))],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert tomllib.loads(out.stdout)["mcp_servers"]["example_session_state_mgmt"]["url"].endswith("/mcp")


def connection(client: str, out: str, server: str) -> tuple[str, dict[str, str]]:
    """(url, headers) as the client would read them from the printed configuration."""
    if client == "codex":
        entry = tomllib.loads(out)["mcp_servers"][server]
        assert entry["default_tools_approval_mode"] == "approve"
        return entry["url"], entry["http_headers"]
    if client == "claude-code":
        command = next(line for line in out.splitlines() if line.startswith("claude mcp add"))
        argv = shlex.split(command)
        assert argv[:5] == ["claude", "mcp", "add", "--transport", "http"]
        assert argv[5] == server
        name, value = argv[argv.index("--header") + 1].split(": ", 1)
        mcp_json = json.loads(out[out.index("{") :])
        entry = mcp_json["mcpServers"][server]
        assert entry == {"type": "http", "url": argv[6], "headers": {name: value}, "timeout": 3600000}
        return argv[6], {name: value}
    if client == "gemini":
        entry = json.loads(out)["mcpServers"][server]
        assert entry["trust"] is True
        return entry["httpUrl"], entry["headers"]
    if client == "agents-sdk":
        tree = ast.parse(out)  # valid Python
        call = next(
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "MCPServerStreamableHttp"
        )
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        assert kwargs["name"] == server
        return kwargs["params"]["url"], kwargs["params"]["headers"]
    if client in ("opencode", "kilocode"):
        entry = json.loads(out)["mcp"][server]
        assert entry["type"] == "remote" and entry["enabled"] is True
        return entry["url"], entry["headers"]
    if client == "cline":
        command = next(line for line in out.splitlines() if line.startswith("cline mcp add"))
        argv = shlex.split(command)
        assert argv[:7] == ["cline", "mcp", "add", server, "--transport", "streamableHttp", argv[6]]
        name, value = argv[argv.index("--header") + 1].split(": ", 1)
        transport = json.loads(out[out.index("{") :])["mcpServers"][server]["transport"]
        assert transport == {"type": "streamableHttp", "url": argv[6], "headers": {name: value}}
        return argv[6], {name: value}
    assert client == "json"
    metadata = json.loads(out)
    assert metadata["server_name"] == server and metadata["url_path"] == "/mcp"
    return metadata["url"], metadata["headers"]


@pytest.mark.parametrize("client", sorted(client_config.RENDERERS))
async def test_each_client_config_reaches_its_own_fresh_session(
    counter_bridge: BridgeProcess, tmp_path: Path, client: str
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(counter_row(41)) + "\n" + json.dumps(counter_row(99)) + "\n")
    first = cli("--client", client, "--bridge-url", counter_bridge.url, "--row", str(rows))
    second = cli(
        "--client", client, "--bridge-url", counter_bridge.url, "--row-json", json.dumps(counter_row(7))
    )
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr

    server = "example_session_state_mgmt"
    url, headers = connection(client, first.stdout, server)
    other_url, other_headers = connection(client, second.stdout, server)
    assert url == other_url == f"{counter_bridge.url}/mcp"
    assert set(headers) == {HEADER} and headers != other_headers  # one fresh session per call

    async with mcp_client(url, headers[HEADER]) as session:
        await session.call_tool("increment_counter", {"count": 1})
        value = await session.call_tool("get_counter_value", {})
    assert value.structured_content == {"count": 42}  # the file's first row: 41, plus 1
    async with mcp_client(other_url, other_headers[HEADER]) as session:
        assert (await session.call_tool("get_counter_value", {})).structured_content == {"count": 7}


@pytest.mark.parametrize(
    "client", ["codex", "claude-code", "gemini", "agents-sdk", "opencode", "kilocode", "cline", "json"]
)
def test_server_name_renames_the_client_side_entry(counter_bridge: BridgeProcess, client: str) -> None:
    out = cli(
        "--client", client, "--bridge-url", counter_bridge.url,
        "--row-json", json.dumps(counter_row(1)), "--server-name", "gym",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    url, headers = connection(client, out.stdout, "gym")
    assert url == f"{counter_bridge.url}/mcp" and HEADER in headers


async def test_with_no_row_it_seeds_the_environments_own_first_example_row(
    counter_bridge: BridgeProcess,
) -> None:
    """The README's one-liner: no row given, on the embedded default environment (whose seed
    requires ``initial_count``, so an empty row would be refused)."""
    out = cli("--client", "json", "--bridge-url", counter_bridge.url)
    assert out.returncode == 0, out.stderr
    url, headers = connection("json", out.stdout, "example_session_state_mgmt")
    first = gym_data("example_session_state_mgmt")[0]
    async with mcp_client(url, headers[HEADER]) as session:
        value = await session.call_tool("get_counter_value", {})
    assert value.structured_content == {"count": first["initial_count"]}


def test_errors_are_one_line_and_exit_2(counter_bridge: BridgeProcess, tmp_path: Path) -> None:
    empty_row = cli(
        "--client",
        "json",
        "--bridge-url",
        counter_bridge.url,
        "--row-json",
        '{"responses_create_params": {"input": []}}',
    )
    assert empty_row.returncode == 2 and empty_row.stdout == ""
    assert (
        "HTTP 422" in empty_row.stderr and "initial_count" in empty_row.stderr and "--row" in empty_row.stderr
    )
    assert len(empty_row.stderr.strip().splitlines()) == 1

    unreachable = cli("--client", "codex", "--bridge-url", "http://127.0.0.1:9", "--row-json", "{}")
    assert unreachable.returncode == 2 and "cannot reach the bridge" in unreachable.stderr

    bad_json = cli("--client", "codex", "--row-json", "{not json")
    assert bad_json.returncode == 2 and "--row-json is not valid JSON" in bad_json.stderr

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert "has no rows" in cli("--client", "codex", "--row", str(empty)).stderr

    unknown = cli("--client", "vim")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


def test_renderers_from_a_seed_response() -> None:
    """The exact text each client gets for one fixed seed response (what the READMEs show)."""
    metadata: dict[str, Any] = {
        "server_name": "example_session_state_mgmt",
        "url_path": "/mcp",
        "url": "http://bridge:8000/mcp",
        "transport": "http",
        "headers": {HEADER: "TOKEN"},
    }
    assert client_config.render_codex(metadata) == (
        "[mcp_servers.example_session_state_mgmt]\n"
        'url = "http://bridge:8000/mcp"\n'
        'http_headers = { "X-NeMo-Gym-Session-Token" = "TOKEN" }\n'
        "# the limit on one tool call, in seconds (Codex's default: 60)\n"
        "tool_timeout_sec = 3600\n"
        "# `codex exec` cannot ask for approval: pre-approve this server's tools\n"
        'default_tools_approval_mode = "approve"\n'
    )
    assert client_config.render_claude_code(metadata).splitlines()[1] == (
        "claude mcp add --transport http example_session_state_mgmt http://bridge:8000/mcp "
        "--header 'X-NeMo-Gym-Session-Token: TOKEN'"
    )
    assert client_config.gemini_settings(metadata, "gym") == {
        "mcpServers": {
            "gym": {
                "httpUrl": "http://bridge:8000/mcp",
                "headers": {HEADER: "TOKEN"},
                "timeout": 3600000,
                "trust": True,
            }
        }
    }
    assert (
        "params={'url': 'http://bridge:8000/mcp', 'headers': {'X-NeMo-Gym-Session-Token': 'TOKEN'}, "
        "'sse_read_timeout': 3600.0}" in client_config.render_agents_sdk(metadata)
    )
    # a server name that is not a bare TOML key is quoted
    assert client_config.render_codex(metadata, "my.server").startswith('[mcp_servers."my.server"]')


def test_tool_timeout_is_written_in_each_harness_own_key_and_unit(counter_bridge: BridgeProcess) -> None:
    """``--tool-timeout SECONDS``: one option, each harness's own key and unit (docs/clients.md says
    where each harness reads it)."""
    written: dict[str, str] = {}
    for client in ("codex", "claude-code", "gemini", "agents-sdk", "opencode", "kilocode", "cline"):
        out = cli(
            "--client", client, "--bridge-url", counter_bridge.url,
            "--row-json", json.dumps(counter_row(1)), "--tool-timeout", "90",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        written[client] = out.stdout
    server = "example_session_state_mgmt"
    assert tomllib.loads(written["codex"])["mcp_servers"][server]["tool_timeout_sec"] == 90.0
    assert "\nexport MCP_TOOL_TIMEOUT=90000\n" in written["claude-code"]
    claude = written["claude-code"]
    assert json.loads(claude[claude.index("{") :])["mcpServers"][server]["timeout"] == 90000
    assert json.loads(written["gemini"])["mcpServers"][server]["timeout"] == 90000
    assert "client_session_timeout_seconds=90.0" in written["agents-sdk"]
    assert "'sse_read_timeout': 90.0" in written["agents-sdk"]
    for client in ("opencode", "kilocode"):
        assert json.loads(written[client])["mcp"][server]["timeout"] == 90000
    cline = written["cline"]
    assert json.loads(cline[cline.index("{") :])["mcpServers"][server]["timeout"] == 90

    refused = cli("--client", "codex", "--tool-timeout", "0")
    assert refused.returncode == 2 and "--tool-timeout: must be between 1 and" in refused.stderr
