"""The bridge as a Gym server: the entrypoint Gym's own launcher runs for ``resources_servers/gym_mcp_bridge``.

Gym's launcher (``gym env start`` in nemo-gym 0.5+, ``ng_run`` in 0.4) starts every server instance of
its config the same way: it builds the folder's venv (nemo-gym at the launcher's own version, plus
``requirements.txt``), then runs ``<venv>/bin/python app.py`` in the folder with the resolved config in
``NEMO_GYM_CONFIG_DICT`` and the instance name in ``NEMO_GYM_CONFIG_PATH``; the server is ready when
``http://<host>:<port>/`` answers anything, and a server process that exits aborts the launch.

This file reads its own instance block and does one of two things:

* **managed** (the default): hands over (``exec``) to the bridge's own environment, which serves on the
  instance's ``host``/``port`` in front of ``environment`` (a bundled Gym environment name,
  ``module:Class``, or ``config.yaml:instance``), its upstream run by this venv's interpreter (so the
  upstream's nemo-gym is the launcher's), the MCP server name being the instance name (as Gym's own
  MCP exposure names it), and the port accepting connections only once a seed can be served
  (``--listen-when-ready``: Gym counts any answer as ready).
* **remote** (``bridge_url`` set, or ``remote: true``): a bridge already runs elsewhere (Compose,
  Kubernetes) at the instance's ``host``/``port``, which is where Gym's agents reach it. Nothing is
  served here; this process stays up for the launcher, checks the bridge's ``/readyz`` every
  ``watch_interval_s`` and says in one line when it becomes unreachable (and when it is back).

Instance keys besides Gym's own (``entrypoint``, ``host``, ``port``, ``domain``):

    environment: example_session_state_mgmt   # what the bridge serves (managed)
    bridge: {secret_file: /run/key, audit_log: /tmp/audit.jsonl}   # any `gym-mcp-bridge serve` setting
    bridge_command: /opt/gym-mcp-bridge/.venv/bin/gym-mcp-bridge   # where the bridge is installed
    bridge_url: http://bridge.example:8000      # remote mode: the running bridge
    watch_interval_s: 10                        # remote mode

The bridge is found by ``bridge_command``, else ``GYM_MCP_BRIDGE_COMMAND``, else the file
``bridge_command`` beside this one (written by ``gym-mcp-bridge gym-entry``), else the checkout this
file lives in (``.venv/bin/gym-mcp-bridge`` after ``make setup``), else ``gym-mcp-bridge`` on PATH.

Runs under Gym's interpreter (Python 3.12+, with nemo-gym's dependencies): standard library and PyYAML.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

import yaml

NAME = "gym_mcp_bridge"
DEFAULT_ENVIRONMENT = "example_session_state_mgmt"
ENV_PREFIX = "GYM_MCP_BRIDGE_"


def fail(message: str) -> NoReturn:
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def instance() -> tuple[str, dict[str, Any]]:
    """The instance name and its block (``<name>.resources_servers.<folder>``) from Gym's config."""
    name = os.environ.get("NEMO_GYM_CONFIG_PATH", "")
    try:
        config = yaml.safe_load(os.environ.get("NEMO_GYM_CONFIG_DICT") or "{}") or {}
        servers = config[name]["resources_servers"]
        (block,) = servers.values()
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        fail(
            f"no resources_servers block for instance {name!r} in NEMO_GYM_CONFIG_DICT: start me with Gym's launcher"
        )
    if not isinstance(block, dict) or "host" not in block or "port" not in block:
        fail(f"instance {name!r} has no host/port")
    return name, block


def bridge_command(block: dict[str, Any]) -> list[str]:
    here = Path(__file__).resolve().parent
    given = block.get("bridge_command") or os.environ.get(f"{ENV_PREFIX}COMMAND")
    if not given and (here / "bridge_command").is_file():
        given = (here / "bridge_command").read_text().strip()
    if given:
        command = [str(part) for part in given] if isinstance(given, list) else [str(given)]
        if shutil.which(command[0]) is None:
            fail(f"bridge_command {command[0]!r} is not an executable")
        return command
    # this file in a checkout: <checkout>/bridge/gym_entry/resources_servers/gym_mcp_bridge/app.py
    checkout = here.parents[3] / ".venv" / "bin" / "gym-mcp-bridge"
    if checkout.is_file():
        return [str(checkout)]
    found = shutil.which("gym-mcp-bridge")
    if found is None:
        fail(
            "cannot find the gym-mcp-bridge command: run `make setup` in the gym-mcp-bridge checkout, or "
            "set bridge_command in this instance's config (or GYM_MCP_BRIDGE_COMMAND)"
        )
    return [str(found)]


def setting_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def serve(name: str, block: dict[str, Any]) -> None:
    """Replace this process with the bridge (signals from the launcher then reach it directly)."""
    command = [
        *bridge_command(block),
        "serve",
        "--host",
        str(block["host"]),
        "--port",
        str(block["port"]),
        "--server-name",
        name,
        "--listen-when-ready",
    ]
    env = {key: value for key, value in os.environ.items() if not key.startswith("NEMO_GYM_CONFIG_")}
    env.pop("VIRTUAL_ENV", None)  # this venv's; the bridge runs in its own
    env.pop(f"{ENV_PREFIX}COMMAND", None)  # this file's setting, not the bridge's
    env.setdefault(f"{ENV_PREFIX}GYM_PYTHON", sys.executable)  # the launcher's nemo-gym, in this venv
    settings = block.get("bridge") or {}
    if not isinstance(settings, dict):
        fail("`bridge` must be a mapping of gym-mcp-bridge settings (field: value)")
    for field, value in settings.items():
        env[f"{ENV_PREFIX}{str(field).upper()}"] = setting_value(value)
    if "upstream_url" not in settings:  # with one, the bridge refuses a managed-mode server beside it
        command += ["--resources-server", str(block.get("environment") or DEFAULT_ENVIRONMENT)]
    print(
        f"{NAME}: starting the bridge for {name} on {block['host']}:{block['port']}",
        file=sys.stderr,
        flush=True,
    )
    os.execvpe(command[0], command, env)  # a bare command name is looked up on PATH, as `which` found it


def readiness(url: str) -> str | None:
    """None when the bridge answers ready, else why not (one line)."""
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as answer:
            return None if answer.status == 200 else f"answered {answer.status}"
    except urllib.error.HTTPError as exc:
        return f"not ready ({exc.code}): {exc.read(300).decode(errors='replace').strip()}"
    except (OSError, ValueError) as exc:
        return f"unreachable: {getattr(exc, 'reason', exc)}"


def watch(name: str, block: dict[str, Any]) -> None:
    """Stay up for the launcher; say in one line whenever the remote bridge's readiness changes."""
    url = str(block.get("bridge_url") or f"http://{block['host']}:{block['port']}").rstrip("/")
    interval = float(block.get("watch_interval_s") or 10)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(
        f"{NAME}: {name} is the remote bridge at {url}; nothing is served here", file=sys.stderr, flush=True
    )
    last: str | None = "unknown"
    try:
        while True:
            reason = readiness(url)
            if reason != last:
                state = "ready" if reason is None else reason
                print(f"{NAME}: remote bridge {url} {state}", file=sys.stderr, flush=True)
                last = reason
            time.sleep(interval)
    except KeyboardInterrupt:
        pass


def main() -> None:
    name, block = instance()
    if block.get("bridge_url") or block.get("remote"):
        watch(name, block)
    else:
        serve(name, block)


if __name__ == "__main__":
    main()
