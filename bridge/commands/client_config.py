"""``gym-mcp-bridge client-config --client NAME``: seed a fresh session, print a harness's MCP config.

Data flow: a Gym row (``--row FILE.jsonl`` first row, ``--row-json``, else the bridge's
``GET /example_row``: the first example row of the environment it serves, or an empty prompt) →
``POST <bridge>/seed_session`` over httpx (``--api-key`` as ``Authorization: Bearer`` when the
bridge requires one) → the answer's ``mcp`` block (``resources_tools`` for Gym >= 0.7 typed seeds)
(the row and the seed: ``bridge/commands/client_seed.py``) → (``--public-url``: the answer's ``url``
rebased on the URL the client reaches) → one renderer per client (this module), printed on stdout:

| client | output |
|---|---|
| ``codex`` | ``config.toml`` table ``[mcp_servers.<name>]`` with ``url`` + ``http_headers`` |
| ``claude-code`` | the ``claude mcp add --transport http ... --header ...`` line and a ``.mcp.json`` |
| ``gemini`` | ``settings.json`` ``mcpServers`` entry with ``httpUrl`` + ``headers`` |
| ``agents-sdk`` | a Python snippet with ``MCPServerStreamableHttp(params={"url", "headers"})`` |
| ``opencode`` | ``opencode.json`` with an ``mcp.<name>`` entry ``{"type": "remote", "url", "headers"}`` |
| ``kilocode`` | ``kilo.json`` (Kilo Code CLI), the same ``mcp.<name>`` remote entry |
| ``cline`` | the ``cline mcp add --transport streamableHttp ... --yes`` line and the settings file it writes |
| ``json`` | the seed's MCP metadata as JSON |

Each harness's own limit on one tool call is written from ``--tool-timeout SECONDS`` (default
``DEFAULT_TOOL_TIMEOUT_S``, an hour: the bridge and Gym set none, and the session's token lives
``session_ttl_s``, an hour by default): Codex ``tool_timeout_sec``, Gemini CLI ``timeout`` (ms),
Claude Code's per-server ``timeout`` in ``.mcp.json`` or ``MCP_TOOL_TIMEOUT`` in its environment
(ms), OpenCode and Kilo Code ``timeout``
(ms), Cline ``timeout`` (seconds); docs/clients.md says where each harness reads it.

By default the harness is configured with the seed answer's ``server_name``, the name the bridge
trusts when it resolves the harness's ``mcp__<name>__<tool>`` forms before ``/verify``.
``--server-name`` renames the server on the client side only: the bridge then trusts that name
once the session's own tool calls prove it, or when it is declared (``--server-aliases`` on the
bridge, ``_bridge.server_aliases`` in the verify body); see docs/naming.md. The token in the
output is the session's credential: it expires with the session (``session_ttl_s``). Errors
(bridge unreachable, a 4xx from the upstream's seed validation) are one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.commands.client_seed import ClientConfigError, example_row, load_row, seed
from bridge.scoring.harnesses import HARNESSES

DEFAULT_BRIDGE_URL = "http://127.0.0.1:8000"
DEFAULT_TOOL_TIMEOUT_S = 3600.0  # a harness's limit on one tool call (see the module docstring)
MAX_TOOL_TIMEOUT_S = 999_999  # Claude Code reads at most 9 digits of ms; Node timers overflow at 24.8 days


# -- renderers --------------------------------------------------------------------------------------


def _name(metadata: dict[str, Any], server_name: str | None) -> str:
    return server_name or str(metadata["server_name"])


def _headers(metadata: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (metadata.get("headers") or {}).items()}


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _number(value: float) -> str:
    """A TOML number: an integer when it is whole (as Codex's own examples write seconds)."""
    return str(int(value)) if value == int(value) else repr(value)


def _ms(timeout_s: float) -> int:
    return max(1, round(timeout_s * 1000))


def render_codex(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    """``config.toml`` table for Codex CLI (``$CODEX_HOME/config.toml``)."""
    headers = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in _headers(metadata).items())
    return "\n".join(
        [
            f"[mcp_servers.{_toml_key(_name(metadata, server_name))}]",
            f"url = {json.dumps(metadata['url'])}",
            f"http_headers = {{ {headers} }}",
            "# the limit on one tool call, in seconds (Codex's default: 60)",
            f"tool_timeout_sec = {_number(timeout_s)}",
            "# `codex exec` cannot ask for approval: pre-approve this server's tools",
            'default_tools_approval_mode = "approve"',
            "",
        ]
    )


def claude_mcp_json(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> dict[str, Any]:
    entry = {
        "type": "http",
        "url": metadata["url"],
        "headers": _headers(metadata),
        "timeout": _ms(timeout_s),  # ms, this server's tool-call limit (over MCP_TOOL_TIMEOUT)
    }
    return {"mcpServers": {_name(metadata, server_name): entry}}


def render_claude_code(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    """The ``claude mcp add`` command line and the tool-call limit Claude Code then reads from its
    environment (the command has no flag for it), then the equivalent ``.mcp.json``, which carries
    the limit in the server's own ``timeout``."""
    argv = ["claude", "mcp", "add", "--transport", "http", _name(metadata, server_name), str(metadata["url"])]
    for key, value in _headers(metadata).items():
        argv += ["--header", f"{key}: {value}"]
    return "\n".join(
        [
            "# command line (add --scope project|user to choose where it is stored)",
            shlex.join(argv),
            "",
            "# the limit on one tool call, in ms, read from claude's environment (or settings.json's env)",
            f"export MCP_TOOL_TIMEOUT={_ms(timeout_s)}",
            "",
            "# or .mcp.json (claude --mcp-config .mcp.json)",
            json.dumps(claude_mcp_json(metadata, server_name, timeout_s), indent=2),
            "",
        ]
    )


def gemini_settings(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> dict[str, Any]:
    entry = {
        "httpUrl": metadata["url"],
        "headers": _headers(metadata),
        "timeout": _ms(timeout_s),  # ms, on every request to this server (tool calls included)
        "trust": True,  # no confirmation prompt per tool call (needed for `gemini -p` rollouts)
    }
    return {"mcpServers": {_name(metadata, server_name): entry}}


def render_gemini(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    """``settings.json`` (``.gemini/settings.json``) for Gemini CLI."""
    return json.dumps(gemini_settings(metadata, server_name, timeout_s), indent=2) + "\n"


def render_agents_sdk(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    """A Python snippet for the OpenAI Agents SDK."""
    params = {"url": metadata["url"], "headers": _headers(metadata), "sse_read_timeout": float(timeout_s)}
    return "\n".join(
        [
            "from agents import Agent, Runner",
            "from agents.mcp import MCPServerStreamableHttp",
            "",
            "",
            "async def rollout(prompt: str) -> str:",
            "    async with MCPServerStreamableHttp(",
            f"        name={_name(metadata, server_name)!r},",
            f"        params={params!r},",
            "        cache_tools_list=True,",
            f"        client_session_timeout_seconds={float(timeout_s)!r},",
            "    ) as server:",
            '        agent = Agent(name="gym-rollout", mcp_servers=[server])',
            "        result = await Runner.run(agent, prompt)",
            "        return str(result.final_output)",
            "",
        ]
    )


def opencode_config(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> dict[str, Any]:
    entry = {
        "type": "remote",
        "url": metadata["url"],
        "headers": _headers(metadata),
        "enabled": True,
        "timeout": _ms(timeout_s),  # ms, per request (tool calls wait on it, reset by each progress)
    }
    return {"mcp": {_name(metadata, server_name): entry}}


def render_opencode(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    """``opencode.json`` (in the project folder, or the file ``OPENCODE_CONFIG`` names)."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        **opencode_config(metadata, server_name, timeout_s),
    }
    return json.dumps(config, indent=2) + "\n"


def render_kilocode(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    """``kilo.json`` for the Kilo Code CLI (``kilo``; an OpenCode fork, same ``mcp`` entries)."""
    return json.dumps(opencode_config(metadata, server_name, timeout_s), indent=2) + "\n"


def cline_settings(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> dict[str, Any]:
    """The MCP settings file as ``cline mcp add --yes`` writes it (``CLINE_MCP_SETTINGS_PATH``), with
    the server's ``timeout`` (whole seconds, at least 1), which the command line cannot set."""
    transport = {"type": "streamableHttp", "url": metadata["url"], "headers": _headers(metadata)}
    entry = {"transport": transport, "timeout": max(1, round(timeout_s))}
    return {"mcpServers": {_name(metadata, server_name): entry}}


def render_cline(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    """The ``cline mcp add`` command line, then the settings file with the tool-call limit."""
    name = _name(metadata, server_name)
    argv = ["cline", "mcp", "add", name, "--transport", "streamableHttp", str(metadata["url"])]
    for key, value in _headers(metadata).items():
        argv += ["--header", f"{key}: {value}"]
    return "\n".join(
        [
            "# command line (writes ~/.cline/data/settings/cline_mcp_settings.json)",
            shlex.join([*argv, "--yes"]),
            "",
            '# then this file, which adds the limit on one tool call ("timeout", seconds; Cline\'s default: 60)',
            "# (its path can be given with CLINE_MCP_SETTINGS_PATH)",
            json.dumps(cline_settings(metadata, server_name, timeout_s), indent=2),
            "",
        ]
    )


def render_json(
    metadata: dict[str, Any], server_name: str | None = None, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> str:
    shown = dict(metadata)
    if server_name:
        shown["server_name"] = server_name
    return json.dumps(shown, indent=2) + "\n"


Renderer = Callable[[dict[str, Any], str | None, float], str]  # (metadata, server name, tool timeout)
# each config format a harness of the registry may name (``Harness.config``)
FORMATS: dict[str, Renderer] = {
    "codex": render_codex,
    "claude-code": render_claude_code,
    "gemini": render_gemini,
    "agents-sdk": render_agents_sdk,
    "opencode": render_opencode,
    "kilocode": render_kilocode,
    "cline": render_cline,
}
# --client: every harness of the registry with a config format, and the raw metadata
RENDERERS: dict[str, Renderer] = {
    **{h.name: FORMATS[h.config] for h in HARNESSES if h.config is not None},
    "json": render_json,
}


# -- command line -------------------------------------------------------------------------------------

RETRIES_NOTE = (
    "# retries: a tools/call whose answer was lost may be sent again and is applied once: the same JSON-RPC "
    "id under the Mcp-Session-Id that initialize gave, or the same Idempotency-Key header (or tools/call "
    "param idempotencyKey); see docs/clients.md, 'Retries'"
)


def run(args: argparse.Namespace) -> int:
    try:
        row = load_row(args.row, args.row_json)
        if row is None:
            row = example_row(args.bridge_url, args.api_key)
        metadata = seed(args.bridge_url, row, args.api_key)
    except ClientConfigError as exc:
        print(f"gym-mcp-bridge client-config: {exc}", file=sys.stderr)
        return 2
    if args.public_url:  # the seed's url names the owning replica as the cluster sees it
        metadata["url"] = args.public_url.rstrip("/") + str(metadata.get("url_path") or "/mcp")
    sys.stdout.write(RENDERERS[args.client](metadata, args.server_name, args.tool_timeout))
    print(RETRIES_NOTE, file=sys.stderr)
    return 0


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "client-config",
        help="seed a session and print a harness's MCP configuration for it",
        description="Seed a fresh session through a running bridge and print the MCP configuration "
        "that connects the named client to it (the session token is in the output). A tools/call "
        "sent again (its answer lost) is applied once: the same JSON-RPC id under the Mcp-Session-Id "
        "given at initialize, or the same Idempotency-Key header or idempotencyKey param.",
    )
    parser.add_argument("--client", required=True, choices=sorted(RENDERERS), help="which harness")
    parser.add_argument(
        "--bridge-url",
        default=os.environ.get("GYM_MCP_BRIDGE_URL", DEFAULT_BRIDGE_URL),
        help=f"the running bridge [env GYM_MCP_BRIDGE_URL; default {DEFAULT_BRIDGE_URL}]",
    )
    rows = parser.add_mutually_exclusive_group()
    rows.add_argument(
        "--row", type=Path, metavar="FILE.jsonl", help="seed with the first row of a Gym JSONL file"
    )
    rows.add_argument("--row-json", metavar="JSON", help="seed with this Gym row")
    parser.add_argument(
        "--server-name",
        help="the server's name on the client side (default: the bridge's, which it trusts for name "
        "resolution; another name is trusted once the session's calls prove it, see docs/naming.md)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("GYM_MCP_BRIDGE_API_KEY"),
        help="the bridge's api_key, when it has one [env GYM_MCP_BRIDGE_API_KEY]",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="the base URL the client reaches the bridge by (a kubectl port-forward, an ingress), used "
        "with the seed's url_path instead of the seed's url, which names the owning replica as the "
        "cluster sees it; calls then reach the owner through the replica behind URL",
    )
    parser.add_argument(
        "--tool-timeout",
        type=_seconds,
        default=DEFAULT_TOOL_TIMEOUT_S,
        metavar="SECONDS",
        help="the harness's own limit on one tool call, written in its config (Codex tool_timeout_sec, "
        "Gemini and OpenCode/Kilo timeout in ms, Claude Code MCP_TOOL_TIMEOUT, Cline timeout; "
        f"default {DEFAULT_TOOL_TIMEOUT_S:g}: long agentic tools, as Gym and the bridge set none)",
    )
    parser.set_defaults(handler=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1 <= value <= MAX_TOOL_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_TOOL_TIMEOUT_S} seconds, got {text}")
    return value
