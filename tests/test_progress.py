"""A long ``tools/call`` keeps its client waiting, and a client that gives up loses nothing.

The upstream is the fault fixture (``tests/fixtures/fault_injection_server.py``), whose ``slow_tool
{seconds}`` sleeps and then answers ``{"slept": seconds}``; its request counter says how many times
the upstream ran a call. The bridge sends progress every 0.3 s (``--progress-interval-s``), so a call
of a few seconds shows what a call of minutes does (docs/clients.md records a three-minute run).

- A call with ``_meta.progressToken`` that runs past one interval is answered as an SSE stream:
  ``notifications/progress`` for the token at the interval, then the answer the JSON path gives for
  the same call, byte for byte; a call answered within the interval is answered as without a token.
- The MCP Python SDK's client, whose HTTP read timeout is shorter than the call, completes it
  because progress arrives; without a progress callback (no token) the same call times out.
- A call whose client gives up (its request cancelled, the client closed) runs to its end upstream,
  once, and ``/verify`` of the session's ``recorded`` log scores it with its result.
- A retry with the same idempotency key, sent after the client timed out, gets the first call's
  answer when it comes; the upstream ran the call once.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.bridges import HEADER, BridgeProcess, upstream_url
from tests.fixtures.harness import verify
from tests.fixtures.helpers import (
    MCP_HEADERS,
    PROGRESS_INTERVAL_S,
    external_bridge,
    metric,
    rpc_call,
    shared_progress_bridge,
    slow_row,
    upstream_counts,
    wait_for,
)

pytestmark = pytest.mark.anyio

INTERVAL = PROGRESS_INTERVAL_S
CALL_S = 2.0


@pytest.fixture(scope="module")
def bridge(log_dir: Path) -> BridgeProcess:
    return shared_progress_bridge(log_dir)


def seed(bridge: BridgeProcess) -> str:
    return str(bridge.seed(slow_row("slow_tool", "get_counter_value"))["mcp"]["headers"][HEADER])


def slow_calls(bridge: BridgeProcess) -> int:
    return upstream_counts(upstream_url(bridge)).get("POST /slow_tool", 0)


def with_token(message: dict[str, Any], token: str | int) -> dict[str, Any]:
    message["params"]["_meta"] = {**message["params"].get("_meta", {}), "progressToken": token}
    return message


def sse_events(stream: httpx.Response) -> Iterator[tuple[float, bytes]]:
    """(arrival time, data) of each SSE event of a streamed response, as it arrives."""
    block: list[bytes] = []
    for line in stream.iter_lines():
        if line:
            block.append(line.encode())
            continue
        data = [part[5:].removeprefix(b" ") for part in block if part.startswith(b"data:")]
        block = []
        if data:
            yield time.monotonic(), b"\n".join(data)


MODERN = "2026-07-28"  # the stateless revision: its envelope in _meta, answered by the fast path
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}


@pytest.mark.parametrize("revision", ["2025-11-25", MODERN])
def test_a_long_call_streams_progress_then_the_answer_the_json_path_gives(
    bridge: BridgeProcess, revision: str
) -> None:
    token = seed(bridge)
    headers = {**MCP_HEADERS, HEADER: token, "mcp-protocol-version": revision}
    call = rpc_call("slow_tool", {"seconds": CALL_S}, 7)
    if revision == MODERN:
        headers |= {"mcp-method": "tools/call", "mcp-name": "slow_tool"}
        call["params"]["_meta"] = dict(ENVELOPE)
    plain = httpx.post(f"{bridge.url}/mcp", json=call, headers=headers, timeout=30)
    assert plain.status_code == 200 and plain.headers["content-type"] == "application/json"
    assert orjson.loads(plain.content)["result"]["structuredContent"] == {"slept": CALL_S}

    began = time.monotonic()
    with httpx.stream(
        "POST", f"{bridge.url}/mcp", json=with_token(call, "tok-1"), headers=headers, timeout=30
    ) as streamed:
        assert streamed.status_code == 200
        assert streamed.headers["content-type"] == "text/event-stream"
        events = list(sse_events(streamed))
    *progress, (_, last) = events
    assert last == plain.content  # the JSON answer's bytes, as the last event
    messages = [orjson.loads(data) for _, data in progress]
    assert {m["method"] for m in messages} == {"notifications/progress"}
    assert {m["params"]["progressToken"] for m in messages} == {"tok-1"}
    values = [m["params"]["progress"] for m in messages]
    assert values == sorted(set(values)) and "total" not in messages[0]["params"]
    assert messages[-1]["params"]["message"].startswith("upstream tool running, ")
    # the first after one interval, then one per interval until the answer
    assert len(progress) >= CALL_S / INTERVAL - 2, values
    arrivals = [began, *(at for at, _ in progress)]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert all(INTERVAL * 0.5 < gap < INTERVAL * 3 for gap in gaps), gaps


def test_a_call_answered_within_the_interval_is_answered_as_without_a_token(bridge: BridgeProcess) -> None:
    token = seed(bridge)
    headers = {**MCP_HEADERS, HEADER: token}
    call = rpc_call("get_counter_value", {}, 3)
    plain = httpx.post(f"{bridge.url}/mcp", json=call, headers=headers, timeout=30)
    quick = httpx.post(f"{bridge.url}/mcp", json=with_token(call, 42), headers=headers, timeout=30)
    assert quick.headers["content-type"] == plain.headers["content-type"] == "application/json"
    assert quick.content == plain.content
    # a client that does not accept SSE gets JSON however long the call
    json_only = {**headers, "accept": "application/json"}
    slow = httpx.post(
        f"{bridge.url}/mcp",
        json=with_token(rpc_call("slow_tool", {"seconds": 1.0}, 4), "t"),
        headers=json_only,
        timeout=30,
    )
    assert slow.headers["content-type"] == "application/json"
    assert orjson.loads(slow.content)["result"]["structuredContent"] == {"slept": 1.0}


def sdk_client(bridge: BridgeProcess, token: str, read_timeout: float) -> tuple[httpx2.AsyncClient, Client]:
    http = httpx2.AsyncClient(headers={HEADER: token}, timeout=httpx2.Timeout(30, read=read_timeout))
    return http, Client(streamable_http_client(f"{bridge.url}/mcp", http_client=http))  # type: ignore[arg-type]


async def test_the_python_sdk_client_waits_past_its_read_timeout_on_progress(bridge: BridgeProcess) -> None:
    token = seed(bridge)
    seen: list[tuple[float, float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((time.monotonic(), progress, total, message))

    http, client = sdk_client(bridge, token, read_timeout=1.0)  # the call takes twice that
    async with http, client:
        began = time.monotonic()
        result = await client.call_tool("slow_tool", {"seconds": CALL_S}, progress_callback=on_progress)
        took = time.monotonic() - began
        assert result.structured_content == {"slept": CALL_S} and not result.is_error
        assert took >= CALL_S
        assert len(seen) >= CALL_S / INTERVAL - 2
        assert [p for _, p, _, _ in seen] == sorted({p for _, p, _, _ in seen})
        assert {t for _, _, t, _ in seen} == {None}
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
        assert all(gap < INTERVAL * 3 for gap in gaps), gaps

    # without a progress callback the SDK sends no token: a JSON answer, and its read times out
    http, client = sdk_client(bridge, token, read_timeout=1.0)
    with pytest.raises(BaseException) as failed:
        async with http, client:
            await client.call_tool("slow_tool", {"seconds": CALL_S})
    assert httpx2.ReadTimeout in causes(failed.value), failed.value


def causes(exc: BaseException) -> set[type[BaseException]]:
    """The types of ``exc``, of the exceptions of a group, and of their causes."""
    found: set[type[BaseException]] = set()
    stack = [exc]
    while stack:
        one = stack.pop()
        found.add(type(one))
        stack += list(getattr(one, "exceptions", ())) + [e for e in (one.__cause__, one.__context__) if e]
    return found


async def test_a_call_whose_client_gives_up_runs_once_and_is_scored_with_its_result(
    bridge: BridgeProcess,
) -> None:
    token = seed(bridge)
    before = slow_calls(bridge)
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    http, client = sdk_client(bridge, token, read_timeout=30)
    async with http, client:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(CALL_S / 2):  # the client gives up halfway, mid stream
                await client.call_tool("slow_tool", {"seconds": CALL_S}, progress_callback=on_progress)
    assert seen  # it was cancelled while the progress stream ran
    assert slow_calls(bridge) == before + 1  # the upstream has the call, still running

    # it runs to its end; a /verify sent at once waits for it, and the session's log has its outcome
    began = time.monotonic()
    scored = verify(bridge, token, {"trajectory": {"format": "recorded"}})
    assert time.monotonic() - began >= CALL_S / 2 - 0.5  # it waited for the call given up on
    assert scored["_bridge"]["recorded_tool_calls"] == 1
    outputs = [i for i in scored["response"]["output"] if i["type"] == "function_call_output"]
    assert [orjson.loads(o["output"]) for o in outputs] == [{"slept": CALL_S}]
    [proof] = scored["_bridge"]["provenance"]["calls"].values()
    assert proof["served"] is True and proof["tool"] == "slow_tool"
    assert slow_calls(bridge) == before + 1  # applied once


async def test_notifications_cancelled_leaves_the_call_to_finish_once(bridge: BridgeProcess) -> None:
    """Gym has no cancel and the call may have changed state: a ``notifications/cancelled`` for a running
    call is acknowledged, and the call runs to its end, once, logged with its result."""
    token = seed(bridge)
    before = slow_calls(bridge)
    headers = {**MCP_HEADERS, HEADER: token}
    body = with_token(rpc_call("slow_tool", {"seconds": CALL_S}, 9), "to-cancel")
    async with httpx.AsyncClient(base_url=bridge.url, headers=headers, timeout=30) as client:
        running = asyncio.ensure_future(client.post("/mcp", json=body))
        await asyncio.sleep(CALL_S / 2)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
        assert (await client.post("/mcp", json=cancel)).status_code == 202
        answered = await running
    last = [line for line in answered.text.splitlines() if line.startswith("data:")][-1]
    assert orjson.loads(last[5:])["result"]["structuredContent"] == {"slept": CALL_S}
    scored = verify(bridge, token, {"trajectory": {"format": "recorded"}})
    assert scored["_bridge"]["recorded_tool_calls"] == 1
    assert slow_calls(bridge) == before + 1


def test_a_connection_dropped_mid_stream_leaves_the_call_to_finish_once(bridge: BridgeProcess) -> None:
    token = seed(bridge)
    before = slow_calls(bridge)
    headers = {**MCP_HEADERS, HEADER: token}
    body = with_token(rpc_call("slow_tool", {"seconds": CALL_S}, 11), "dropped")
    with httpx.stream("POST", f"{bridge.url}/mcp", json=body, headers=headers, timeout=30) as streamed:
        first = next(sse_events(streamed))  # the stream has begun: a progress notification came
        assert orjson.loads(first[1])["method"] == "notifications/progress"
    # the connection is closed here, halfway; the verify sent at once waits for the call
    scored = verify(bridge, token, {"trajectory": {"format": "recorded"}})
    outputs = [i for i in scored["response"]["output"] if i["type"] == "function_call_output"]
    assert [orjson.loads(o["output"]) for o in outputs] == [{"slept": CALL_S}]
    assert slow_calls(bridge) == before + 1
    assert "Traceback" not in bridge.log()


def test_a_retry_after_a_client_timeout_gets_the_first_answer_when_it_comes(bridge: BridgeProcess) -> None:
    token = seed(bridge)
    before = slow_calls(bridge)
    headers = {**MCP_HEADERS, HEADER: token}
    call = rpc_call("slow_tool", {"seconds": CALL_S}, 1)
    call["params"]["idempotencyKey"] = "long-1"
    began = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{bridge.url}/mcp", json=call, headers=headers, timeout=httpx.Timeout(10, read=0.5))
    call["id"] = 2  # a new request of the client, the same key
    again = httpx.post(f"{bridge.url}/mcp", json=call, headers=headers, timeout=30)
    took = time.monotonic() - began
    assert orjson.loads(again.content)["result"]["structuredContent"] == {"slept": CALL_S}
    assert CALL_S <= took < CALL_S * 1.5  # the first call's answer, not a second call's
    assert wait_for(lambda: slow_calls(bridge) == before + 1, 5)
    time.sleep(0.5)
    assert slow_calls(bridge) == before + 1


def test_a_call_relayed_to_its_owner_replica_streams_progress_from_the_relay(
    bridge: BridgeProcess, log_dir: Path
) -> None:
    """Another replica's session: the relaying replica sends the progress while the owner works (the
    owner's own stream is read whole by the relay), then the owner's answer as the last event."""
    relay = external_bridge(
        log_dir, upstream_url(bridge), "--progress-interval-s", str(INTERVAL), server_name=bridge_name(bridge)
    )
    try:
        token = seed(bridge)
        headers = {**MCP_HEADERS, HEADER: token}
        call = rpc_call("slow_tool", {"seconds": CALL_S}, 5)
        plain = httpx.post(f"{bridge.url}/mcp", json=call, headers=headers, timeout=30)
        began = time.monotonic()
        with httpx.stream(
            "POST", f"{relay.url}/mcp", json=with_token(call, "relayed"), headers=headers, timeout=30
        ) as streamed:
            assert streamed.headers["content-type"] == "text/event-stream"
            events = list(sse_events(streamed))
        *progress, (_, last) = events
        assert last == plain.content
        messages = [orjson.loads(data) for _, data in progress]
        assert len(messages) >= CALL_S / INTERVAL - 2
        assert {m["params"]["progressToken"] for m in messages} == {"relayed"}
        values = [m["params"]["progress"] for m in messages]
        assert values == sorted(set(values))  # one replica's count, never the owner's interleaved
        arrivals = [began, *(at for at, _ in progress)]  # as they were sent, not all at the end
        assert all(gap < INTERVAL * 3 for gap in (b - a for a, b in itertools.pairwise(arrivals)))
        assert metric(relay, "gym_mcp_bridge_forwarded_total", outcome="relayed") == 1
    finally:
        relay.stop()


def bridge_name(bridge: BridgeProcess) -> str:
    return str(bridge.health()["upstream"]["server_name"])
