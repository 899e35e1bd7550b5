#!/usr/bin/env python3
"""One Codex CLI rollout against a gym-mcp-bridge session, scored by the environment's /verify.

Steps (each a function below, so other code can reuse them):

1. ``seed``: ``POST <bridge>/seed_session`` with a Gym JSONL row; the answer's ``mcp`` block names
   the server, the MCP URL and the session header.
2. ``codex_config``: a ``config.toml`` for a private ``CODEX_HOME``: one ``[mcp_servers.<name>]``
   entry (``url`` + ``http_headers`` carrying ``X-NeMo-Gym-Session-Token``, tools pre-approved so
   ``codex exec`` never waits for a human) and, optionally, a Responses-API model provider.
3. ``run_codex_exec``: ``codex exec --json --ephemeral --skip-git-repo-check`` with the row's user
   prompt; returns the JSONL events Codex prints.
4. ``exec_events_to_response``: those events as a Responses object (``mcp_tool_call`` items become
   ``function_call`` + ``function_call_output`` pairs named as Codex named them to the model:
   ``namespace: mcp__<server>`` + ``name: <tool>``, or ``mcp__<server>__<tool>`` with
   ``style="flat"``).
5. ``verify``: ``POST <bridge>/verify`` with the session header, once with
   ``trajectory: {"format": "recorded"}`` (the bridge's own log of the calls it served) and once
   with Codex's own events as ``trajectory: {"format": "codex-exec", "messages": events}`` (the
   bridge converts them as in step 4); the bridge maps Codex's names back to the environment's.

Runs in the bridge's environment (``make setup``'s ``.venv/bin/python``, Python >= 3.11): the
standard library, and ``bridge.scoring.trajectory`` for step 4. From the project root:

    .venv/bin/python examples/clients/codex/run_codex.py --bridge-url http://127.0.0.1:8000 \\
        --row examples/gym/data/example_session_state_mgmt.jsonl \\
        --model-base-url https://api.openai.com/v1 --model gpt-5.1-codex --api-key-env OPENAI_API_KEY

Prints one JSON object: the seed metadata, the config written, Codex's events, the converted
response and both /verify answers (``reward`` and the bridge's ``_bridge`` report).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

try:
    from bridge.scoring.trajectory import from_codex_exec
except ImportError:  # a Python without the bridge installed (a bare `python`)
    sys.exit(
        "run_codex.py: needs the bridge's environment: run it as .venv/bin/python "
        "examples/clients/codex/run_codex.py from the project root (after make setup)"
    )

HEADER = "X-NeMo-Gym-Session-Token"
PROVIDER_ID = "gym_provider"


# -- bridge -------------------------------------------------------------------------------------


def post_json(url: str, body: Any, headers: dict[str, str] | None = None, timeout: float = 300) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raise SystemExit(
            f"POST {url} answered HTTP {exc.code}: {exc.read().decode(errors='replace')}"
        ) from exc


def seed(bridge_url: str, row: dict[str, Any]) -> dict[str, Any]:
    """``/seed_session`` through the bridge; the answer holds ``mcp`` (or ``resources_tools``)."""
    answer = post_json(f"{bridge_url.rstrip('/')}/seed_session", row)
    if not isinstance(answer, dict):
        raise SystemExit(f"unexpected /seed_session answer: {answer!r}")
    return answer


def mcp_metadata(seed_answer: dict[str, Any]) -> dict[str, Any]:
    metadata = seed_answer.get("mcp") or seed_answer.get("resources_tools")
    if not isinstance(metadata, dict):
        raise SystemExit("the /seed_session answer has no 'mcp' metadata: is the URL the bridge's?")
    return metadata


def verify(
    bridge_url: str,
    token: str,
    *,
    response: dict[str, Any] | None = None,
    recorded: bool = False,
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``/verify`` for the session; with no row fields the bridge uses the row it seeded. The
    rollout is the bridge's own record (``recorded``), Codex's ``exec --json`` events (the bridge
    converts them: trajectory format ``codex-exec``), or a Responses object."""
    body: dict[str, Any]
    if recorded:
        body = {"trajectory": {"format": "recorded"}}
    elif events is not None:
        body = {"trajectory": {"format": "codex-exec", "messages": events}}
    else:
        body = {"response": response}
    answer = post_json(f"{bridge_url.rstrip('/')}/verify", body, {HEADER: token})
    return dict(answer)


# -- config.toml --------------------------------------------------------------------------------


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # inline table
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_dumps(data: dict[str, Any], prefix: str = "") -> str:
    """Tables of scalars, lists and inline tables (``inline`` keys stay inline): what Codex reads."""
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, dict) and not key.endswith("headers"):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    chunks = ["\n".join(lines)] if lines else []
    for key, value in tables:
        name = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
        body = toml_dumps(value, name)
        chunks.append(f"[{name}]" + (f"\n{body}" if body else ""))
    return "\n\n".join(chunks) + ("\n" if not prefix else "")


def mcp_server_entry(metadata: dict[str, Any], url: str | None = None) -> dict[str, Any]:
    """The ``[mcp_servers.<name>]`` table for one seeded session."""
    return {
        "url": url or metadata["url"],
        "http_headers": {str(k): str(v) for k, v in (metadata.get("headers") or {}).items()},
        # `codex exec` cannot ask a human: without this every MCP call fails with
        # "MCP tool call requires approval, but approval policy is never".
        "default_tools_approval_mode": "approve",
        "startup_timeout_sec": 30,
        "tool_timeout_sec": 3600,  # Codex's default is 60 s; agentic tools run for minutes
    }


def codex_config(
    metadata: dict[str, Any],
    *,
    server_name: str | None = None,
    url: str | None = None,
    model: str | None = None,
    model_base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
) -> dict[str, Any]:
    """The whole ``config.toml`` for a rollout's private ``CODEX_HOME``."""
    config: dict[str, Any] = {
        "approval_policy": "never",
        "sandbox_mode": "read-only",
        "web_search": "disabled",
        "check_for_update_on_startup": False,
    }
    if model:
        config["model"] = model
    if model_base_url:
        config["model_provider"] = PROVIDER_ID
    config["analytics"] = {"enabled": False}
    config["history"] = {"persistence": "none"}
    if model_base_url:
        config["model_providers"] = {
            PROVIDER_ID: {
                "name": PROVIDER_ID,
                "base_url": model_base_url,  # Codex POSTs <base_url>/responses (SSE)
                "env_key": api_key_env,
                "wire_api": "responses",
                "request_max_retries": 0,
                "stream_max_retries": 0,
            }
        }
    name = server_name or str(metadata["server_name"])
    config["mcp_servers"] = {name: mcp_server_entry(metadata, url)}
    return config


# -- codex exec ---------------------------------------------------------------------------------


def user_prompt(row: dict[str, Any]) -> str:
    """The row's user turns as one prompt (system turns go to ``developer_instructions``)."""
    given = row.get("responses_create_params", {}).get("input", "")
    if isinstance(given, str):
        return given
    texts = []
    for message in given:
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            texts.append(str(content))
    return "\n\n".join(texts)


def system_prompt(row: dict[str, Any]) -> str | None:
    given = row.get("responses_create_params", {}).get("input", "")
    if isinstance(given, str):
        return None
    texts = [str(m.get("content")) for m in given if m.get("role") in ("system", "developer")]
    return "\n\n".join(texts) or None


def run_codex_exec(
    codex: str,
    config: dict[str, Any],
    prompt: str,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 300,
    strict_config: bool = True,
) -> tuple[list[dict[str, Any]], str, int]:
    """Run ``codex exec --json`` in a fresh CODEX_HOME and scratch dir; (events, stderr, exit code)."""
    home = Path(tempfile.mkdtemp(prefix="codex-home-"))
    work = Path(tempfile.mkdtemp(prefix="codex-work-"))
    try:
        (home / "config.toml").write_text(toml_dumps(config))
        argv = [codex, "exec", "--json", "--ephemeral", "--skip-git-repo-check", "--cd", str(work)]
        if strict_config:
            argv.append("--strict-config")  # fail on any key this Codex version does not know
        result = subprocess.run(
            [*argv, "--", prompt],
            env={**os.environ, **(env or {}), "CODEX_HOME": str(home)},
            stdin=subprocess.DEVNULL,  # piped stdin would be appended to the prompt
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    events = []
    for line in result.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    return events, result.stderr, result.returncode


# -- exec --json -> Responses object ------------------------------------------------------------


def exec_events_to_response(
    events: list[dict[str, Any]], *, style: str = "namespace", model: str = "codex"
) -> dict[str, Any]:
    """``codex exec --json`` events -> a Responses object (``bridge.scoring.trajectory.from_codex_exec``).

    ``style="namespace"`` keeps MCP calls as current Codex shows them to the model (``namespace:
    "mcp__<server>"`` + ``name: "<tool>"``); ``style="flat"`` joins them into
    ``mcp__<server>__<tool>`` (older Codex, Claude Code)."""
    response = from_codex_exec(events, model=model)
    if style == "flat":
        for item in response["output"]:
            if item.get("type") == "function_call" and "namespace" in item:
                item["name"] = f"{item.pop('namespace')}__{item['name']}"
    return response


# -- command line -------------------------------------------------------------------------------


def rollout(
    bridge_url: str,
    row: dict[str, Any],
    *,
    codex: str = "codex",
    model: str | None = None,
    model_base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    server_name: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 300,
) -> dict[str, Any]:
    seed_answer = seed(bridge_url, row)
    metadata = mcp_metadata(seed_answer)
    config = codex_config(
        metadata, server_name=server_name, model=model, model_base_url=model_base_url, api_key_env=api_key_env
    )
    if system := system_prompt(row):
        config = {"developer_instructions": system, **config}
    events, stderr, code = run_codex_exec(codex, config, user_prompt(row), env=env, timeout_s=timeout_s)
    token = str(metadata["headers"][HEADER])
    response = exec_events_to_response(events, model=model or "codex")
    return {
        "mcp": metadata,
        "config_toml": toml_dumps(config),
        "codex_exit_code": code,
        "codex_stderr_tail": stderr[-2000:],
        "events": events,
        "response": response,
        "verify_recorded": verify(bridge_url, token, recorded=True),
        "verify_exec_json": verify(bridge_url, token, events=events),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridge-url", default="http://127.0.0.1:8000")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--row", type=Path, help="a Gym JSONL file; its first row is used")
    source.add_argument("--row-json", help="one Gym row as JSON")
    parser.add_argument("--codex", default=shutil.which("codex") or "codex", help="the codex executable")
    parser.add_argument("--model", help="model name written to config.toml")
    parser.add_argument("--model-base-url", help="a Responses-API provider base URL (Codex adds /responses)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="env var holding the provider key")
    parser.add_argument(
        "--server-name", help="the [mcp_servers.<name>] key (default: the seed's server_name)"
    )
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    if args.row is not None:
        row = json.loads(next(line for line in args.row.read_text().splitlines() if line.strip()))
    else:
        row = json.loads(args.row_json)
    report = rollout(
        args.bridge_url,
        row,
        codex=args.codex,
        model=args.model,
        model_base_url=args.model_base_url,
        api_key_env=args.api_key_env,
        server_name=args.server_name,
        timeout_s=args.timeout,
    )
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0 if report["codex_exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
