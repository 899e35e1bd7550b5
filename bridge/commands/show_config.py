"""``gym-mcp-bridge show-config``: what a client needs to reach this deployment, printed where the
bridge runs (``docker compose exec bridge gym-mcp-bridge show-config``).

Reads the same ``GYM_MCP_BRIDGE_*`` settings as ``serve`` and the key files of ``state_dir``
(without creating them), then asks the bridge those settings describe (``--bridge-url``, default the
address they bind) for its ``/healthz``. When it answers, what is printed is that running bridge's:
its MCP and seed URLs, whether its REST surface requires a key (``rest_auth``) and how its session
tokens are signed; a key known here is shown with whether that bridge accepts it (``GET
/example_row``, which checks the key and touches nothing else). When no bridge answers, the
settings of this shell are printed, and the first line says which of the two it is (``--json``: one
object, for scripts such as examples/quickstart.py). The key is printed only here, on request;
``serve`` logs only where it is kept.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import httpx
from pydantic import ValidationError

from bridge.commands import keyfiles
from bridge.settings import ENV_PREFIX, Settings, advertise_url, describe_error

PROBE_TIMEOUT_S = 3.0


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "show-config",
        help="print this deployment's MCP URL and REST API key",
        description="Print the MCP URL, the seed URL and the REST API key of the bridge configured by "
        f"the {ENV_PREFIX}* environment here (the key files of {ENV_PREFIX}STATE_DIR are read, never made). "
        "When that bridge is running (it answers /healthz at --bridge-url), its own key and token "
        "settings are reported, and whether it accepts the key known here; otherwise this shell's "
        "settings. The first line says which.",
    )
    parser.add_argument(
        "--bridge-url",
        default=os.environ.get(f"{ENV_PREFIX}URL"),
        help=f"the running bridge to ask [env {ENV_PREFIX}URL; default: the host and port the settings bind]",
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


def probe_url(settings: Settings, given: str | None) -> str:
    """Where the bridge these settings describe answers from here: ``--bridge-url``, else the bound
    address (a wildcard bind is reached on loopback)."""
    if given:
        return given.rstrip("/")
    return advertise_url(settings.model_copy(update={"advertise_url": None}), (settings.host, settings.port))


def running(url: str, key: str | None) -> dict[str, Any] | None:
    """What the bridge at ``url`` says of itself (its ``/healthz``), and whether it accepts ``key``;
    None when nothing there answers as a bridge."""
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S) as http:
            health = http.get(f"{url}/healthz").json()
            if not isinstance(health, dict) or "rest_auth" not in health:
                return None
            accepted = None
            if key is not None and health["rest_auth"] == "api_key":
                answer = http.get(f"{url}/example_row", headers={"authorization": f"Bearer {key}"})
                accepted = answer.status_code != 401
    except (httpx.HTTPError, ValueError):
        return None
    return {**health, "key_accepted": accepted}


def report(settings: Settings, bridge_url: str | None) -> dict[str, Any]:
    """``describe(settings)``, overridden by the running bridge's own answers when one answers."""
    shown = describe(settings)
    url = probe_url(settings, bridge_url)
    health = running(url, shown["api_key"])
    if health is None:
        return {**shown, "reported": "settings", "bridge_url": url, "rest_auth": None, "session_tokens": None}
    base = str(health.get("advertise_url") or url)
    return {
        **shown,
        "url": base,
        "mcp_url": f"{base}/mcp",
        "seed_url": f"{base}/seed_session",
        "api_key": shown["api_key"] if health["rest_auth"] == "api_key" else None,
        "api_key_accepted": health["key_accepted"],
        "api_key_set_here": shown["api_key"] is not None,
        "reported": "running bridge",
        "bridge_url": url,
        "rest_auth": health["rest_auth"],
        "session_tokens": health.get("session_tokens"),
    }


def cmd_show_config(args: argparse.Namespace) -> int:
    try:
        shown = report(Settings.model_validate({}), args.bridge_url)
    except ValidationError as exc:
        print(f"gym-mcp-bridge show-config: {describe_error(exc)}")
        return 2
    except ValueError as exc:
        print(f"gym-mcp-bridge show-config: {exc}")
        return 2
    if args.json:
        print(json.dumps(shown))
        return 0
    for line in lines(shown):
        print(line)
    return 0


def lines(shown: dict[str, Any]) -> list[str]:
    key, url = shown["api_key"], shown["bridge_url"]
    live = shown["reported"] == "running bridge"
    out = [
        f"reporting: the running bridge at {url} (its /healthz)"
        if live
        else f"reporting: this shell's {ENV_PREFIX}* settings (no bridge answers at {url})",
        f"MCP URL:   {shown['mcp_url']}   (each session's token comes from the seed answer)",
        f"seed URL:  {shown['seed_url']}",
    ]
    send = "           send it as 'Authorization: Bearer <key>' on /seed_session, /verify, POST /<tool>"
    if live and shown["rest_auth"] == "api_key" and key is None:
        out.append(
            "API key:   required by this bridge, not known to this shell: read it where the bridge keeps it "
            f"(its key file or {ENV_PREFIX}API_KEY; compose: docker compose exec bridge gym-mcp-bridge show-config)"
        )
    elif live and shown["rest_auth"] == "api_key":
        out.append(f"API key:   {key}")
        out.append(send)
        if not shown["api_key_accepted"]:
            out.append(
                "           REFUSED by this bridge: it was started with another key; use the one it was given"
            )
    elif key is None:
        out.append("API key:   none (the REST surface is open to whoever reaches the port)")
    else:
        out.append(f"API key:   {key}")
        out.append(send)
    if live and shown["rest_auth"] == "none" and shown["api_key_set_here"]:
        out.append("           (this shell's settings name a key, but this bridge was started without one)")
    elif shown["api_key_file"]:
        out.append(f"key file:  {shown['api_key_file']}")
    tokens = shown.get("session_tokens")
    if live and isinstance(tokens, dict):
        out.append(f"tokens:    signing key {tokens.get('signing_key')}; lifetime {tokens.get('ttl_s'):g}s")
    return out
