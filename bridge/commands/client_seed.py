"""How ``gym-mcp-bridge client-config`` gets a session to configure: the row, then the seed.

The row is the one given (``load_row``: ``--row-json``, or the first row of ``--row FILE.jsonl``),
else the bridge's own (``example_row``: ``GET /example_row``, the first example row of the
environment it serves, or ``EMPTY_ROW`` when it has none); ``seed`` posts it to the bridge's
``POST /seed_session`` over httpx (``--api-key`` as ``Authorization: Bearer``) and returns the
answer's ``mcp`` block (``resources_tools`` for Gym >= 0.7 typed seeds), which
``bridge/commands/client_config.py`` renders for the harness. Every failure (unreadable row, bridge
unreachable, a 401 with what fixes it, the upstream's 4xx) is a ``ClientConfigError`` with one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

EMPTY_ROW: dict[str, Any] = {"responses_create_params": {"input": []}}


class ClientConfigError(Exception):
    """A one-line reason ``client-config`` stops (exit 2): a bad row, a bridge unreachable or refusing."""


def load_row(row_file: Path | None, row_json: str | None) -> dict[str, Any] | None:
    """The row given with --row-json or --row; None when neither was given."""
    if row_json is not None:
        try:
            value = json.loads(row_json)
        except ValueError as exc:
            raise ClientConfigError(f"--row-json is not valid JSON: {exc}") from exc
    elif row_file is not None:
        try:
            lines = [line for line in row_file.read_text().splitlines() if line.strip()]
        except OSError as exc:
            raise ClientConfigError(f"cannot read --row {row_file}: {exc.strerror}") from exc
        if not lines:
            raise ClientConfigError(f"--row {row_file} has no rows")
        try:
            value = json.loads(lines[0])
        except ValueError as exc:
            raise ClientConfigError(f"the first line of {row_file} is not valid JSON: {exc}") from exc
    else:
        return None
    if not isinstance(value, dict):
        raise ClientConfigError("a Gym row must be a JSON object")
    return value


def refused_key(url: str, response: httpx.Response, api_key: str | None) -> str:
    """A 401 from the bridge, with what this command needs to pass it."""
    detail = " ".join(response.text.split())[:300]
    if api_key is None:
        fix = (
            "this bridge requires its REST API key: pass --api-key KEY or set GYM_MCP_BRIDGE_API_KEY "
            "(where the bridge runs, `gym-mcp-bridge show-config` prints it)"
        )
    else:
        fix = (
            "the key given (--api-key / GYM_MCP_BRIDGE_API_KEY) is not this bridge's: pass the one it was "
            "started with (where it runs, `gym-mcp-bridge show-config` prints it)"
        )
    return f"{url} answered HTTP 401 ({detail}): {fix}"


def example_row(bridge_url: str, api_key: str | None = None, timeout: float = 30) -> dict[str, Any]:
    """The first example row of the environment the bridge serves (``GET /example_row``)."""
    url = f"{bridge_url.rstrip('/')}/example_row"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ClientConfigError(f"cannot reach the bridge at {bridge_url}: {exc}") from exc
    if response.status_code == 404:  # external mode, no shipped data, or an older bridge
        return dict(EMPTY_ROW)
    if response.status_code == 401:
        raise ClientConfigError(refused_key(url, response, api_key))
    if not response.is_success:
        raise ClientConfigError(
            f"{url} answered HTTP {response.status_code}: {' '.join(response.text.split())[:300]}"
        )
    row = response.json()
    if not isinstance(row, dict):
        raise ClientConfigError(f"{url} did not answer a row")
    return row


def seed(
    bridge_url: str, row: dict[str, Any], api_key: str | None = None, timeout: float = 60
) -> dict[str, Any]:
    """``POST /seed_session`` through the bridge; returns the session's MCP metadata."""
    url = f"{bridge_url.rstrip('/')}/seed_session"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.post(url, json=row, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ClientConfigError(f"cannot reach the bridge at {bridge_url}: {exc}") from exc
    if response.status_code == 401:
        raise ClientConfigError(refused_key(url, response, api_key))
    if not response.is_success:
        detail = " ".join(response.text.split())[:500]
        hint = (
            " (pass a row of this environment with --row or --row-json)"
            if response.status_code == 422
            else ""
        )
        raise ClientConfigError(f"{url} answered HTTP {response.status_code}: {detail}{hint}")
    try:
        payload = response.json()
    except ValueError as exc:
        raise ClientConfigError(f"{url} did not answer JSON") from exc
    metadata = payload.get("mcp") or payload.get("resources_tools") if isinstance(payload, dict) else None
    if not isinstance(metadata, dict) or "url" not in metadata or "headers" not in metadata:
        raise ClientConfigError(f"{url} answered without MCP metadata: is {bridge_url} a gym-mcp-bridge?")
    return dict(metadata)
