"""``gym-mcp-bridge show-config``: what a client needs to reach this deployment, printed where the
bridge runs (``docker compose exec bridge gym-mcp-bridge show-config``).

Reads the same ``GYM_MCP_BRIDGE_*`` settings as ``serve`` and the key files of ``state_dir``
(without creating them), and prints the MCP URL, the seed URL and the REST API key (``--json``:
one object, for scripts such as examples/quickstart.py). The key is printed only here, on request;
``serve`` logs only where it is kept.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from pydantic import ValidationError

from bridge.commands import keyfiles
from bridge.settings import ENV_PREFIX, Settings, advertise_url, describe_error


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "show-config",
        help="print this deployment's MCP URL and REST API key",
        description="Print the MCP URL, the seed URL and the REST API key of the bridge configured by "
        f"the {ENV_PREFIX}* environment here (the key files of {ENV_PREFIX}STATE_DIR are read, never made).",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.set_defaults(handler=cmd_show_config)


def describe(settings: Settings) -> dict[str, Any]:
    settings, files = keyfiles.use_state_dir(settings, generate=False)
    base = advertise_url(settings, (settings.host, settings.port))
    out: dict[str, Any] = {
        "url": base,
        "mcp_url": f"{base}/mcp",
        "seed_url": f"{base}/seed_session",
        "api_key": None,
        "api_key_file": str(settings.api_key_file) if settings.api_key_file else None,
        "signing_key_file": str(settings.secret_file) if settings.secret_file else None,
    }
    if settings.api_key is not None:
        out["api_key"] = settings.api_key.get_secret_value()
    elif settings.api_key_file is not None:
        path = settings.api_key_file
        if not path.exists() and keyfiles.API_KEY in files:
            raise ValueError(f"no API key yet: the bridge generates {path} on its first start")
        try:
            out["api_key"] = path.read_text().strip()
        except OSError as exc:
            raise ValueError(f"{path} cannot be read by uid {os.getuid()}: {exc.strerror}") from exc
    return out


def cmd_show_config(args: argparse.Namespace) -> int:
    try:
        shown = describe(Settings.model_validate({}))
    except ValidationError as exc:
        print(f"gym-mcp-bridge show-config: {describe_error(exc)}")
        return 2
    except ValueError as exc:
        print(f"gym-mcp-bridge show-config: {exc}")
        return 2
    if args.json:
        print(json.dumps(shown))
        return 0
    key = shown["api_key"]
    print(f"MCP URL:   {shown['mcp_url']}   (each session's token comes from the seed answer)")
    print(f"seed URL:  {shown['seed_url']}")
    if key is None:
        print("API key:   none (the REST surface is open to whoever reaches the port)")
    else:
        print(f"API key:   {key}")
        print("           send it as 'Authorization: Bearer <key>' on /seed_session, /verify, POST /<tool>")
    if shown["api_key_file"]:
        print(f"key file:  {shown['api_key_file']}")
    return 0
