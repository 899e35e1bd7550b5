"""End to end over MCP with the official SDK client against Gym's real stateful counter server."""

from __future__ import annotations

import anyio
import httpx
import pytest

from tests.fixtures.bridges import BridgeProcess, counter_row, mcp_client

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_50_concurrent_sessions_each_see_exactly_their_own_counter(
    counter_bridge: BridgeProcess, mode: str
) -> None:
    results: dict[int, int] = {}
    negotiated: set[str] = set()

    async def rollout(i: int) -> None:
        initial = 1000 * i
        async with httpx.AsyncClient() as http:
            seed = (await http.post(f"{counter_bridge.url}/seed_session", json=counter_row(initial))).json()
        meta = seed["mcp"]
        async with mcp_client(meta["url"], meta["headers"]["X-NeMo-Gym-Session-Token"], mode) as client:
            negotiated.add(client.protocol_version)
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["increment_counter", "get_counter_value"]
            for step in range(1, i % 5 + 2):
                result = await client.call_tool("increment_counter", {"count": step})
                assert not result.is_error, result
            value = await client.call_tool("get_counter_value", {})
            assert value.structured_content is not None
            results[i] = value.structured_content["count"]

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(rollout, i)
    expected = {i: 1000 * i + sum(range(1, i % 5 + 2)) for i in range(50)}
    assert results == expected
    assert negotiated == ({"2025-11-25"} if mode == "legacy" else {"2026-07-28"})


async def test_http_passthrough_and_mcp_reach_the_same_upstream_session(
    counter_bridge: BridgeProcess,
) -> None:
    async with httpx.AsyncClient(base_url=counter_bridge.url) as http:
        seed = (await http.post("/seed_session", json=counter_row(10))).json()
        upstream_cookie = [c for c in http.cookies if c.startswith("StatefulCounterResourcesServer")]
        assert upstream_cookie, "the upstream's Set-Cookie must reach the Gym client"
        # a plain Gym client: cookies only, no token header
        assert (await http.post("/increment_counter", json={"count": 5})).json() == {"success": True}
        token = seed["mcp"]["headers"]["X-NeMo-Gym-Session-Token"]
        async with mcp_client(seed["mcp"]["url"], token, bearer=True) as client:
            await client.call_tool("increment_counter", {"count": 7})
            via_mcp = await client.call_tool("get_counter_value", {})
        assert via_mcp.structured_content == {"count": 22}
        # a cookie-less caller naming the session by token header reaches the same state
        async with httpx.AsyncClient(base_url=counter_bridge.url) as other:
            value = await other.post(
                "/get_counter_value", json={}, headers={"X-NeMo-Gym-Session-Token": token}
            )
        assert value.json() == {"count": 22}
        # and a fresh cookie-less caller without a token gets a fresh upstream session (count 0)
        async with httpx.AsyncClient(base_url=counter_bridge.url) as stranger:
            assert (await stranger.post("/get_counter_value", json={})).json() == {"count": 0}


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
async def test_every_handshake_revision_is_negotiated(counter_bridge: BridgeProcess, version: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{counter_bridge.url}/mcp", json=body, headers=headers)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "example_session_state_mgmt"


async def test_tools_list_without_token_is_the_openapi_list(counter_bridge: BridgeProcess) -> None:
    async with mcp_client(f"{counter_bridge.url}/mcp") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"increment_counter", "get_counter_value"}
        assert tools["increment_counter"].input_schema["properties"]["count"]["type"] == "integer"
        refused = await client.call_tool("get_counter_value", {})
    assert refused.is_error
    assert "missing session token" in refused.content[0].text  # type: ignore[union-attr]
