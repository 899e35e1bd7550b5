"""Play one full rollout against a running bridge (``make run``) with the official MCP SDK client.

    .venv/bin/python examples/quickstart.py [--bridge-url http://127.0.0.1:8000]

Seeds a session from the first row of Gym's ``example_session_state_mgmt`` data ("add 1 then add
2 then get the count", starting at 3), lists the session's tools over MCP, calls them as an agent
would, and asks the bridge to score the rollout from its own record of the calls. Prints each step
and the reward (1.0: the counter ended at the row's expected_count, 6).
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROW = {
    "responses_create_params": {
        "input": [{"content": "add 1 then add 2 then get the count", "role": "user"}],
        "tools": [
            {
                "name": "increment_counter",
                "parameters": {
                    "type": "object",
                    "properties": {"count": {"type": "integer", "description": ""}},
                    "required": ["count"],
                    "additionalProperties": False,
                },
                "strict": True,
                "type": "function",
                "description": "",
            },
            {
                "name": "get_counter_value",
                "parameters": {
                    "type": "object",
                    "properties": {},
                    "required": [],
                    "additionalProperties": False,
                },
                "strict": True,
                "type": "function",
                "description": "",
            },
        ],
    },
    "expected_count": 6,
    "initial_count": 3,
}


async def main(bridge_url: str) -> float:
    async with httpx.AsyncClient(base_url=bridge_url, timeout=60) as http:
        seed = (await http.post("/seed_session", json=ROW)).raise_for_status().json()
        mcp = seed["mcp"]
        print(f"seeded a session on {mcp['server_name']}; MCP endpoint {mcp['url']}")
        async with (
            httpx2.AsyncClient(headers=mcp["headers"], timeout=60) as mcp_http,
            Client(streamable_http_client(mcp["url"], http_client=mcp_http), mode="legacy") as client,
        ):
            print(f"negotiated MCP protocol revision {client.protocol_version}")
            tools = [tool.name for tool in (await client.list_tools()).tools]
            print(f"tools: {', '.join(tools)}")
            for count in (1, 2):
                result = await client.call_tool("increment_counter", {"count": count})
                print(f"increment_counter(count={count}) -> {result.content[0].text}")  # type: ignore[union-attr]
            value = await client.call_tool("get_counter_value", {})
            print(f"get_counter_value() -> {value.content[0].text}")  # type: ignore[union-attr]
        verdict = (
            (
                await http.post(
                    "/verify",
                    json={"trajectory": {"format": "recorded", "final_text": "The count is 6."}},
                    headers=mcp["headers"],
                )
            )
            .raise_for_status()
            .json()
        )
    report = dict(verdict["_bridge"])
    calls = report.pop("provenance")["calls"].values()
    print(f"bridge report: {json.dumps(report)}")
    print(f"provenance: {sum(c['served'] for c in calls)} of {len(calls)} calls served by the bridge, signed")
    print(f"reward: {verdict['reward']}")
    return float(verdict["reward"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bridge-url", default="http://127.0.0.1:8000")
    reward = asyncio.run(main(parser.parse_args().bridge_url.rstrip("/")))
    raise SystemExit(0 if reward == 1.0 else 1)
