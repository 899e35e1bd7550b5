"""The real Gemini CLI (``@google/gemini-cli``, pinned in ``tests/interop/gemini``) running whole
rollouts through the bridge.

Gemini CLI needs a Gemini model; none is reachable here. Its own documented switch
``GOOGLE_GEMINI_BASE_URL`` (``docs/reference/configuration.md`` in the package: "Overrides the
default base URL for Gemini API requests (when using gemini-api-key authentication)", plain HTTP
allowed for localhost) points it at ``StubGeminiApi`` (``tests/interop/stubs/gemini_stub.py``), a
local stub of ``models/<m>:streamGenerateContent`` that replays the calls solving the row, read
from the row itself. Everything else is real: ``.gemini/settings.json`` is what
``gym-mcp-bridge client-config --client gemini`` prints (``httpUrl`` + session header, ``trust``),
``gemini -p --output-format stream-json`` connects to the bridge's ``/mcp`` and calls the tools,
and ``/verify`` scores the CLI's own ``tool_use`` / ``tool_result`` events (as an ``openai-chat``
trajectory) and the bridge's log (``recorded``), equal to the same calls made natively.

Measured with 0.56.0: headless runs refuse an untrusted folder unless
``GEMINI_CLI_TRUST_WORKSPACE=true`` (or ``--skip-trust``); ``-m gemini-2.5-flash`` is sent to
the API as ``gemini-3.5-flash`` (the CLI's own model aliasing).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, gym_data, upstream_url
from tests.fixtures.harness import (
    Solution,
    client_config,
    counter_solution,
    ground_truth_solution,
    native_reward,
    record_names,
    verify,
)
from tests.fixtures.helpers import shared_progress_bridge, slow_row, upstream_counts
from tests.interop.node import installed_cli
from tests.interop.stubs.gemini_stub import StubGeminiApi
from tests.test_clients_codex import run_codex

pytestmark = pytest.mark.npm

GEMINI_VERSION = "0.56.0"
MODEL = "gemini-2.5-flash"  # any name: the stub answers for every model


@pytest.fixture(scope="module")
def gemini() -> Iterator[str]:
    yield installed_cli("gemini", "gemini", GEMINI_VERSION, {"GEMINI_CLI_NO_RELAUNCH": "1"}, last_line=True)


def run_gemini(
    gemini: str, row: dict[str, Any], solution: Solution, bridge_url: str, tmp: Path, *options: str
) -> tuple[StubGeminiApi, list[dict[str, Any]], str, str]:
    """``.gemini/settings.json`` as client-config (with ``options``) prints it, then ``gemini -p``."""
    settings = json.loads(client_config("gemini", bridge_url, row, *options))
    [(server, entry)] = settings["mcpServers"].items()
    home, work = tmp / "home", tmp / "work"
    (home / ".gemini").mkdir(parents=True)
    (work / ".gemini").mkdir(parents=True)
    (work / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=2))
    # the user's own choice of auth (API key), as `gemini` would store it after the first login
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    with StubGeminiApi(solution) as stub:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "GOOGLE_GEMINI_BASE_URL": stub.base_url,
            "GEMINI_API_KEY": "stub-key",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_NO_RELAUNCH": "1",
        }
        started = time.monotonic()
        ran = subprocess.run(
            [gemini, "-p", run_codex.user_prompt(row), "--output-format", "stream-json", "-m", MODEL],
            cwd=work, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        print(
            f"\ngemini -p: {time.monotonic() - started:.1f}s, exit {ran.returncode}; API paths {sorted(set(stub.paths))}"
        )
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    events = [json.loads(line) for line in ran.stdout.splitlines() if line.strip().startswith("{")]
    return stub, events, server, str(entry["headers"][HEADER])


def trajectory(events: list[dict[str, Any]]) -> dict[str, Any]:
    """stream-json ``tool_use`` / ``tool_result`` / assistant ``message`` events as ``openai-chat``."""
    messages: list[dict[str, Any]] = []
    final: list[str] = []
    for e in events:
        if e.get("type") == "tool_use":
            call = {"id": e["tool_id"], "type": "function",
                    "function": {"name": e["tool_name"], "arguments": json.dumps(e.get("parameters") or {})}}  # fmt: skip
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif e.get("type") == "tool_result":
            output = e.get("output")
            text = output if isinstance(output, str) else json.dumps(e.get("error") or output)
            messages.append({"role": "tool", "tool_call_id": e["tool_id"], "content": text})
        elif e.get("type") == "message" and e.get("role") == "assistant":
            final.append(str(e.get("content") or ""))
    return {"format": "openai-chat", "messages": messages, "final_text": "".join(final)}


NOTE = "gemini -p --output-format stream-json tool_use.tool_name (= the functionDeclaration the stub called)"
NAMES = {  # the header of the names fixture this test writes (``record_names``)
    "version": GEMINI_VERSION,
    "command": (
        "tests/test_clients_gemini.py (merged with tests/interop/capture_gemini_names.py's cases): "
        "HOME=<tmp> GOOGLE_GEMINI_BASE_URL=<stub Gemini API> GEMINI_API_KEY=stub-key "
        "GEMINI_CLI_TRUST_WORKSPACE=true gemini -p <row prompt> --output-format stream-json, with "
        ".gemini/settings.json = `gym-mcp-bridge client-config --client gemini`"
    ),
    "source": f"npm @google/gemini-cli@{GEMINI_VERSION} (tests/interop/gemini/package-lock.json)",
}


# -- tests ----------------------------------------------------------------------------------------


def test_gemini_counter_rollout_scores_like_native(
    gemini: str, counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    row = gym_data("example_session_state_mgmt")[0]  # 3 -> 6
    solution = counter_solution(row)
    stub, events, server, token = run_gemini(gemini, row, solution, counter_bridge.url, tmp_path)
    assert server == "example_session_state_mgmt"
    expected = [f"mcp_{server}_increment_counter", f"mcp_{server}_get_counter_value"]
    assert stub.emitted == expected
    assert [e["tool_name"] for e in events if e.get("type") == "tool_use"] == expected
    results = [e for e in events if e.get("type") == "tool_result"]
    assert [(e["status"], json.loads(e["output"])) for e in results] == [
        ("success", {"success": True}),
        ("success", {"count": 6}),
    ]
    converted = verify(counter_bridge.url, token, {"trajectory": trajectory(events)})
    recorded = verify(counter_bridge.url, token, {"trajectory": {"format": "recorded"}})
    native = native_reward(upstream_url(counter_bridge.url), row, solution)
    assert converted["reward"] == recorded["reward"] == native == 1.0
    assert converted["_bridge"]["normalized"] == {n: t for n, (t, _) in zip(expected, solution, strict=True)}
    assert converted["_bridge"]["unresolved"] == []
    called = [tool for tool, _ in solution]
    record_names(
        "gemini-cli", NAMES, server, ["increment_counter", "get_counter_value"], stub.emitted, called, NOTE
    )


def test_gemini_solving_another_row_scores_zero(
    gemini: str, counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    rows = gym_data("example_session_state_mgmt")
    row, solution = rows[0], counter_solution(rows[1])  # 3 + 9 = 12, row 0 expects 6
    stub, events, _, token = run_gemini(gemini, row, solution, counter_bridge.url, tmp_path)
    assert len(stub.emitted) == 2
    converted = verify(counter_bridge.url, token, {"trajectory": trajectory(events)})
    recorded = verify(counter_bridge.url, token, {"trajectory": {"format": "recorded"}})
    native = native_reward(upstream_url(counter_bridge.url), row, solution)
    assert converted["reward"] == recorded["reward"] == native == 0.0
    assert converted["_bridge"]["unresolved"] == []


@pytest.mark.parametrize("index", [0, 2], ids=["row0", "row2-truncated"])
def test_gemini_workplace_assistant_scores_like_native(
    gemini: str, workplace_bridge: BridgeProcess, tmp_path: Path, index: int
) -> None:
    """Row 2's ``customer_relationship_manager_update_customer`` makes a 69-character
    ``mcp_<server>_<tool>``: Gemini CLI cuts it to the first 30 + ``...`` + the last 30."""
    rows = gym_data("workplace_assistant")
    row, other = rows[index], rows[1]
    solution = ground_truth_solution(row)
    stub, events, server, token = run_gemini(gemini, row, solution, workplace_bridge.url, tmp_path)
    assert len(stub.emitted) == len(solution)
    for name, (tool, _) in zip(stub.emitted, solution, strict=True):
        full = f"mcp_{server}_{tool}"
        assert name == (full if len(full) <= 63 else full[:30] + "..." + full[-30:])
    converted = verify(workplace_bridge.url, token, {"trajectory": trajectory(events)})
    recorded = verify(workplace_bridge.url, token, {"trajectory": {"format": "recorded"}})
    upstream = upstream_url(workplace_bridge.url)
    assert converted["reward"] == recorded["reward"] == native_reward(upstream, row, solution) == 1.0
    assert converted["_bridge"]["unresolved"] == []
    assert converted["_bridge"]["normalized"] == {
        n: t for n, (t, _) in zip(stub.emitted, solution, strict=True)
    }
    wrong = verify(workplace_bridge.url, token, {**other, "trajectory": trajectory(events)})
    assert wrong["reward"] == 0.0 == native_reward(upstream, other, solution)
    tools = [t["name"] for t in row["responses_create_params"]["tools"]]
    record_names("gemini-cli", NAMES, server, tools, stub.emitted, [tool for tool, _ in solution], NOTE)


def test_gemini_waits_for_a_long_call_as_long_as_client_config_lets_it(
    gemini: str, log_dir: Path, tmp_path: Path
) -> None:
    """Gemini CLI sends a progressToken on every call and honors the per-server ``timeout`` (ms) that
    ``client-config --tool-timeout`` writes, as an absolute limit. A 4 s call under a 2 s limit is an
    error the model reads (and the upstream still runs it to its end, once, logged in the session);
    under a 30 s limit it completes, streamed with progress."""
    bridge = shared_progress_bridge(log_dir)
    solution: Solution = [("slow_tool", {"seconds": 4.0})]
    outcomes = {}
    for limit in ("2", "30"):
        before = upstream_counts(upstream_url(bridge)).get("POST /slow_tool", 0)
        _, events, _, token = run_gemini(
            gemini, slow_row("slow_tool"), solution, bridge.url, tmp_path / limit, "--tool-timeout", limit
        )
        [result] = [e for e in events if e.get("type") == "tool_result"]
        outcomes[limit] = result
        # the call given up on runs to its end upstream, once: /verify waits for it
        recorded = verify(bridge.url, token, {"trajectory": {"format": "recorded"}})
        assert upstream_counts(upstream_url(bridge)).get("POST /slow_tool", 0) == before + 1
        assert recorded["_bridge"]["recorded_tool_calls"] == 1
        [output] = [
            i["output"] for i in recorded["response"]["output"] if i["type"] == "function_call_output"
        ]
        assert json.loads(output) == {"slept": 4.0}
    assert outcomes["2"]["status"] == "error" and "timed out" in json.dumps(outcomes["2"]).lower()
    assert outcomes["30"]["status"] == "success" and json.loads(outcomes["30"]["output"]) == {"slept": 4.0}
