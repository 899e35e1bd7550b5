"""``client-config`` for OpenCode, Kilo Code and Cline: the real CLIs (pinned, npm) accept what it prints.

These three harnesses are the ones nemo-gym 0.7.0 drives with agents that do not hand the seed's
``mcp`` block to their CLI (``opencode_agent``, ``kilocode_agent``, ``cline_agent``; see
docs/clients.md "With Gym's own agents"), so a user who wants them on a bridge configures the CLI
directly. Expected values come from the CLIs themselves:

* Cline: ``cline mcp add ... --yes`` (the command line client-config prints, run as printed) writes
  its own settings file; that file must equal the settings JSON client-config printed beside it,
  less the server's ``timeout`` (the tool-call limit), which the command line has no flag for.
* OpenCode and Kilo Code: the printed ``opencode.json`` / ``kilo.json`` placed in a project folder;
  ``<cli> mcp list`` there must report the server connected (it initializes and lists the session's
  tools over streamable HTTP), and report it failed once the session token is replaced by one the
  bridge never issued (which proves the CLI sends the printed header: without any token the bridge
  lets a client initialize and list, and refuses only the calls).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row
from tests.interop.node import ensure_packages
from tests.test_clients_config import cli

pytestmark = pytest.mark.npm

SERVER = "example_session_state_mgmt"
BINARIES = {  # package set -> the CLI binary inside it (the platform build, see its package.json)
    "opencode": "node_modules/opencode-linux-x64/bin/opencode",
    "kilocode": "node_modules/@kilocode/cli-linux-x64/bin/kilo",
    "cline": "node_modules/@cline/cli-linux-x64/bin/cline",
}
CONFIG_FILE = {"opencode": "opencode.json", "kilocode": "kilo.json"}


def binary(name: str) -> str:
    return str(ensure_packages(name).path / BINARIES[name])


def isolated(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".data"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PATH": "/usr/bin:/bin",
    }


def test_cline_writes_the_settings_client_config_prints(
    counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    out = cli(
        "--client", "cline", "--bridge-url", counter_bridge.url, "--row-json", json.dumps(counter_row(4))
    )
    assert out.returncode == 0, out.stderr
    command = next(line for line in out.stdout.splitlines() if line.startswith("cline mcp add"))
    printed = json.loads(out.stdout[out.stdout.index("{") :])
    argv = shlex.split(command)
    ran = subprocess.run(
        [binary("cline"), *argv[1:], "--json"],
        env=isolated(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    written = json.loads((tmp_path / ".cline" / "data" / "settings" / "cline_mcp_settings.json").read_text())
    # the printed file is the written one plus the tool-call limit, which the command line cannot set
    # (its schema maps "timeout", seconds, to the server's timeoutSeconds)
    assert printed["mcpServers"][SERVER].pop("timeout") == 3600
    assert written == printed
    assert written["mcpServers"][SERVER]["transport"]["headers"][HEADER]


@pytest.mark.parametrize("client", ["opencode", "kilocode"])
def test_opencode_and_kilo_connect_with_the_printed_config(
    counter_bridge: BridgeProcess, tmp_path: Path, client: str
) -> None:
    out = cli(
        "--client", client, "--bridge-url", counter_bridge.url, "--row-json", json.dumps(counter_row(4))
    )
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    results = {}
    for case in ("as printed", "forged token"):
        folder = tmp_path / case.replace(" ", "-")
        folder.mkdir()
        if case == "forged token":
            config["mcp"][SERVER]["headers"][HEADER] = "forged-" + config["mcp"][SERVER]["headers"][HEADER]
        (folder / CONFIG_FILE[client]).write_text(json.dumps(config))
        ran = subprocess.run(
            [binary(client), "mcp", "list"],
            env=isolated(folder),
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=180,
        )
        text = re.sub(r"\x1b\[[0-9;]*m", "", ran.stdout + ran.stderr)
        line = next((x for x in text.splitlines() if SERVER in x), text)
        results[case] = line
    assert "connected" in results["as printed"], results
    assert "failed" in results["forged token"], results
