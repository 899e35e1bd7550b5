"""``bridge.scoring.naming.resolve`` against names captured from real clients (not from our renderer).

The fixtures in ``tests/fixtures/client_names/`` hold what Codex CLI, the OpenAI Agents SDK and
Gemini CLI showed the model for a Gym env's MCP tools (``tests/interop/capture_*_names.py``
regenerate them). For every case:

* with the configured server name as the only known alias, the emitted name (and namespace)
  resolves to the MCP tool;
* with an unrelated alias it resolves to nothing: the server part is evidence of *which* server
  the call was made to, so it must be a known alias. The one exception is a bare name (no
  namespace) that is literally the tool's name, which resolves as an exact match.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.scoring import naming

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "client_names"
CLIENTS = ("codex-cli", "openai-agents", "gemini-cli", "claude-code")
OTHER_ALIAS = "some-other-server"


def load(client: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{client}.json").read_text())
    return data


def all_cases() -> list[Any]:
    params = []
    for client in CLIENTS:
        for index, case in enumerate(load(client)["cases"]):
            shown = f"{case['namespace']}.{case['emitted']}" if case["namespace"] else case["emitted"]
            params.append(pytest.param(case, id=f"{client}-{index}-{shown}"))
    return params


@pytest.mark.parametrize("client", CLIENTS)
def test_fixture_is_well_formed(client: str) -> None:
    data = load(client)
    assert data["client"] == client
    for key in ("version", "command", "captured", "source"):
        assert isinstance(data[key], str) and data[key], key
    assert data["cases"]
    for case in data["cases"]:
        assert set(case) >= {"server", "tool", "emitted", "namespace", "tools", "note"}
        assert case["tool"] in case["tools"]
        assert case["namespace"] is None or isinstance(case["namespace"], str)


@pytest.mark.parametrize("case", all_cases())
def test_emitted_name_resolves_with_the_configured_server_alias(case: dict[str, Any]) -> None:
    r = naming.resolve(case["emitted"], case["tools"], [case["server"]], namespace=case["namespace"])
    assert r.canonical == case["tool"], r.reason
    assert r.reason is None


@pytest.mark.parametrize("case", all_cases())
def test_emitted_name_needs_a_known_server_alias(case: dict[str, Any]) -> None:
    r = naming.resolve(case["emitted"], case["tools"], [OTHER_ALIAS], namespace=case["namespace"])
    if case["namespace"] is None and case["emitted"] == case["tool"]:
        assert r.canonical == case["tool"], r.reason  # a bare, exact tool name needs no alias
        return
    assert r.canonical is None
    assert r.reason is not None
