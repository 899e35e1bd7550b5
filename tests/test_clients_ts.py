"""An independent MCP client against the bridge: the official TypeScript SDK on Node.js.

``tests/interop/mcp-sdk`` pins ``@modelcontextprotocol/sdk`` (package-lock.json); the test installs
it under ``.cache/interop/`` (npm download cache in ``.cache/npm``) and runs ``client.mjs``, which
connects over streamable HTTP with the session header, lists the tools and calls them. Nothing of
the bridge's own Python client code is involved, so a protocol detail the Python SDK tolerates
and the TypeScript SDK does not would fail here. A call longer than the SDK's request timeout
completes when ``resetTimeoutOnProgress`` lets the bridge's progress stream restart the timer.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row
from tests.fixtures.helpers import shared_progress_bridge, slow_row
from tests.interop.node import Installed, ensure_packages

pytestmark = pytest.mark.npm

SDK_VERSION = "1.32.2"
# The SDK's LATEST_PROTOCOL_VERSION; it offers it in `initialize` and the bridge accepts it.
NEGOTIATED = "2025-11-25"


@pytest.fixture(scope="module")
def ts_sdk() -> Installed:
    return ensure_packages("mcp-sdk")


def run_client(
    sdk: Installed, url: str, headers: dict[str, str], calls: list[dict[str, Any]]
) -> dict[str, Any]:
    plan = {"url": url, "headers": headers, "calls": calls}
    result = subprocess.run(
        ["node", "client.mjs", json.dumps(plan)], cwd=sdk.path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"client.mjs failed ({result.returncode}):\n{result.stderr}"
    return dict(json.loads(result.stdout))


def seed(bridge: BridgeProcess, initial: int) -> dict[str, Any]:
    return dict(bridge.seed(counter_row(initial))["mcp"])


def test_ts_sdk_lists_and_calls_tools_of_its_own_session(
    ts_sdk: Installed, counter_bridge: BridgeProcess
) -> None:
    first, second = seed(counter_bridge, 100), seed(counter_bridge, 7000)
    calls = [
        {"name": "get_counter_value", "arguments": {}},
        {"name": "increment_counter", "arguments": {"count": 5}},
        {"name": "increment_counter", "arguments": {"count": 11}},
        {"name": "get_counter_value", "arguments": {}},
    ]
    out = run_client(ts_sdk, first["url"], first["headers"], calls)

    assert out["sdk_version"] == SDK_VERSION
    assert out["protocol_version"] == NEGOTIATED == out["sdk_latest_protocol_version"]
    assert out["server"]["name"] == "example_session_state_mgmt"
    assert [t["name"] for t in out["tools"]] == ["increment_counter", "get_counter_value"]
    assert out["tools"][0]["inputSchema"]["properties"]["count"]["type"] == "integer"
    assert out["tools"][0]["inputSchema"]["required"] == ["count"]
    assert [c["isError"] for c in out["calls"]] == [False] * 4
    assert [c["structuredContent"] for c in out["calls"]] == [
        {"count": 100},
        {"success": True},
        {"success": True},
        {"count": 116},
    ]
    assert json.loads(out["calls"][3]["text"]) == {"count": 116}

    # the other session was not touched, and the bearer form of the token works the same way
    bearer = {"Authorization": f"Bearer {second['headers'][HEADER]}"}
    other = run_client(ts_sdk, second["url"], bearer, [{"name": "get_counter_value", "arguments": {}}])
    assert other["calls"][0]["structuredContent"] == {"count": 7000}

    # and the bridge logged each call under the canonical name, as the TS SDK sent it
    verified = httpx.post(
        f"{counter_bridge.url}/verify",
        json={"trajectory": {"format": "recorded"}},
        headers=first["headers"],
        timeout=60,
    ).json()
    assert verified["_bridge"]["recorded_tool_calls"] == 4
    assert verified["_bridge"]["normalized"] == {}
    assert verified["reward"] == 0.0  # counter_row(100) expects 100; the session holds 116


def test_ts_sdk_sees_refusals_as_errors(ts_sdk: Installed, counter_bridge: BridgeProcess) -> None:
    url = f"{counter_bridge.url}/mcp"
    call = [{"name": "get_counter_value", "arguments": {}}]

    anonymous = run_client(ts_sdk, url, {}, call)
    assert [t["name"] for t in anonymous["tools"]] == ["increment_counter", "get_counter_value"]
    assert anonymous["calls"][0]["isError"] is True
    assert "missing session token" in anonymous["calls"][0]["text"]

    forged = run_client(ts_sdk, url, {HEADER: "not-a-token"}, call)
    assert forged["list_error"]["code"] == -32001
    assert forged["calls"][0]["isError"] is True
    assert "malformed" in forged["calls"][0]["text"]


@pytest.fixture(scope="module")
def slow_bridge(log_dir: Path) -> BridgeProcess:
    """The fault fixture (``slow_tool``), sending progress every 0.3 s."""
    return shared_progress_bridge(log_dir)


def test_ts_sdk_waits_for_a_long_call_when_progress_resets_its_timeout(
    ts_sdk: Installed, slow_bridge: BridgeProcess
) -> None:
    """A 2 s call under a 1 s request timeout: with ``resetTimeoutOnProgress`` the SDK's timer restarts
    on each progress notification and the call completes; without it the same call times out."""
    mcp = slow_bridge.seed(slow_row("slow_tool"))["mcp"]
    call = {"name": "slow_tool", "arguments": {"seconds": 2.0}}
    out = run_client(
        ts_sdk,
        mcp["url"],
        mcp["headers"],
        [
            {**call, "options": {"timeout": 1000, "resetTimeoutOnProgress": True}},
            {**call, "options": {"timeout": 1000}},
        ],
    )
    saved, lost = out["calls"]
    assert saved["structuredContent"] == {"slept": 2.0} and saved["ms"] >= 2000
    assert len(saved["progress"]) >= 4
    values = [p["progress"] for p in saved["progress"]]
    assert values == sorted(set(values)) and all("total" not in p for p in saved["progress"])
    assert all(p["message"].startswith("upstream tool running") for p in saved["progress"])
    assert lost["error"]["code"] == -32001 and "timed out" in lost["error"]["message"], lost
    assert 1000 <= lost["ms"] < 2000
