"""Long tool calls released together, as a training step of agentic tools sends them: the bridge
sets no time limit of its own, waits for a connection as long as that takes, and sizes its pools
from the open-file limit, so calls are in the upstream when Gym alone would have them there.

One real Gym resources server (``tests/fixtures/slow_tools_server.py``: ``slow_step`` sleeps, then
counts the call per session; ``/verify`` scores 1.0 only for the row's ``expected_count``), in front
of which bridges run in external mode. Every rollout is a seed, one MCP ``tools/call``, a verify,
each request on a connection of its own; the seeds are sent first, then every call at once. The
expected reward comes from the fixture's own ``/verify`` (1.0 only if the call was applied exactly
once); how many calls were in the upstream at once comes from the fixture's own count (``GET
/in_flight``); how many waited for a connection, and how long, from the bridge's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bridge.settings import Settings, soft_open_files
from tests.fixtures.bridges import (
    GYM_PYTHON,
    HEADER,
    BridgeProcess,
    boot_upstream,
    mcp_client,
    wait_for_upstream,
)
from tests.fixtures.helpers import MCP_HEADERS, fault_env, metric, post_once, rpc_call, text_of

pytestmark = pytest.mark.anyio

SERVER = "tests.fixtures.slow_tools_server:SlowToolsServer"
ROLLOUTS = 300
SECONDS = 3.0
CAP = 100  # --upstream-connections in the capped bridge: three waves of calls
LIMIT = 5.0  # --tool-timeout-s there: less than a call of the third wave waits for its connection
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "run the slow step once"}]}}
RESPONSE = {
    "id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
}  # fmt: skip
CALL_HEADERS = {**MCP_HEADERS, "mcp-protocol-version": "2025-06-18"}


@pytest.fixture(scope="module")
def slow_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("slow-upstream")
    port_file, log = workdir / "port.json", workdir / "upstream.log"
    proc = boot_upstream(GYM_PYTHON, SERVER, port_file, log, env={**os.environ, **fault_env()})
    try:
        yield wait_for_upstream(proc, port_file, log, time.monotonic() + 120)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def in_flight(upstream: str, reset: bool = False) -> dict[str, int]:
    """The fixture's own count of ``slow_step`` calls: sleeping now, the most at once, finished."""
    return dict(httpx.get(f"{upstream}/in_flight", params={"reset": reset} if reset else None).json())


async def seed(url: str) -> str:
    status, _, body = await post_once(url, "/seed_session", ROW)
    assert status == 200, body[:300]
    return str(orjson.loads(body)["mcp"]["headers"][HEADER])


async def call(url: str, token: str, seconds: float) -> dict[str, Any]:
    """One MCP ``tools/call slow_step`` on a new connection: the JSON-RPC result."""
    payload = rpc_call("slow_step", {"seconds": seconds})
    status, _, body = await post_once(url, "/mcp", payload, {**CALL_HEADERS, HEADER: token}, timeout=120)
    assert status == 200, body[:300]
    return dict(orjson.loads(body)["result"])


async def verify(url: str, token: str) -> float:
    status, _, body = await post_once(
        url, "/verify", {**ROW, "response": RESPONSE, "expected_count": 1}, {HEADER: token}
    )
    assert status == 200, body[:300]
    return float(orjson.loads(body)["reward"])


async def seed_all(seeds: list[str], count: int) -> list[str]:
    """``count`` sessions, seeded on ``seeds[i % n]``: their tokens."""
    return list(await asyncio.gather(*(seed(seeds[i % len(seeds)]) for i in range(count))))


async def call_all(calls: list[str], tokens: list[str]) -> tuple[list[Any], float]:
    """Every session's call released at once, to ``calls[i % n]``: results (or exceptions), seconds."""
    began = time.perf_counter()
    results = await asyncio.gather(
        *(call(calls[i % len(calls)], token, SECONDS) for i, token in enumerate(tokens)),
        return_exceptions=True,
    )
    return list(results), time.perf_counter() - began


async def verify_all(seeds: list[str], tokens: list[str]) -> list[Any]:
    return list(
        await asyncio.gather(
            *(verify(seeds[i % len(seeds)], token) for i, token in enumerate(tokens)), return_exceptions=True
        )
    )


def waits(bridge: BridgeProcess, pool: str = "upstream") -> tuple[float, float]:
    """(requests that waited for a connection, seconds they waited), from ``/metrics``."""
    count = metric(bridge, "gym_mcp_bridge_connection_wait_seconds_count", pool=pool)
    return count, metric(bridge, "gym_mcp_bridge_connection_wait_seconds_sum", pool=pool)


def test_no_limit_by_default_and_pools_sized_from_the_file_limit() -> None:
    """Gym's own clients set no time limit on a resources-server call (``ClientTimeout()``): neither
    does the bridge unless told; the pools are shares of the open-file limit, and a limit set by hand
    is kept."""
    settings = Settings.model_validate({})
    assert settings.tool_timeout_s is None and settings.verify_timeout_s is None
    assert settings.connection_bounds(20_000) == (5_000, 1_250)
    assert settings.connection_bounds() == (soft_open_files() // 4, soft_open_files() // 16)
    given = Settings.model_validate({"upstream_connections": 32, "peer_connections": 8})
    assert given.connection_bounds(20_000) == (32, 8)
    with pytest.raises(ValueError, match="tool_timeout_s"):
        Settings.model_validate({"tool_timeout_s": 0})


async def test_calls_past_a_low_cap_wait_for_a_connection_outside_the_limit_and_all_score(
    spawn_bridge: Any, slow_upstream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """300 calls of 3 s at once through 100 connections and a 5 s ``tool_timeout_s``: the third wave
    waits about 6 s for its connections, and still every call is applied once and scores 1.0. The
    queue hands a connection on as an answer frees it: the upstream holds all 100 at once, 200 calls
    waited, and in all no longer than two waves of answers. A call that itself runs past 5 s is
    refused naming the limit."""
    bridge: BridgeProcess = spawn_bridge(
        [
            "--upstream-url",
            slow_upstream,
            "--upstream-connections",
            str(CAP),
            "--tool-timeout-s",
            f"{LIMIT:g}",
        ]
    )
    tokens = await seed_all([bridge.url], ROLLOUTS)
    in_flight(slow_upstream, reset=True)
    waited_before, seconds_before = waits(bridge)

    results, took = await call_all([bridge.url], tokens)

    waited, seconds = waits(bridge)
    waited, seconds = waited - waited_before, seconds - seconds_before
    rewards = await verify_all([bridge.url], tokens)
    failures = [r for r in results if isinstance(r, BaseException) or r.get("isError")]
    assert not failures, f"{len(failures)} of {ROLLOUTS} calls failed, first: {failures[:2]}"
    assert rewards == [1.0] * ROLLOUTS, [r for r in rewards if r != 1.0][:3]
    assert in_flight(slow_upstream)["peak"] == CAP  # every connection in use while calls waited
    assert waited == ROLLOUTS - CAP, "the calls past the cap, each counted once"
    # Handed on as answers come: wave 2 waits one call, wave 3 two (a second of slack each).
    assert seconds <= CAP * (SECONDS + 1) + CAP * (2 * SECONDS + 1), seconds
    health = bridge.health()["connections"]["upstream"]
    assert health["queued"] == 0 and health["limit"] == CAP and health["waited"] >= waited

    refused = await call(bridge.url, await seed(bridge.url), LIMIT + 1)
    text = refused["content"][0]["text"]
    assert refused["isError"] is True
    assert f"upstream did not answer /slow_step within {LIMIT:g}s (tool_timeout_s)" in text, text
    with capsys.disabled():
        print(f"\n[figures] {ROLLOUTS} x {SECONDS:g} s calls through {CAP} connections: {took:.1f} s, "
              f"{seconds / max(waited, 1):.2f} s waited on average by the {waited:.0f} that waited")  # fmt: skip


async def test_on_defaults_every_call_is_in_the_upstream_at_once_none_queued(
    spawn_bridge: Any, slow_upstream: str, tmp_path: Path
) -> None:
    """Two replicas on their defaults, each session seeded on one and its call sent to the other
    (forwarded to the owner): all 300 calls are in the upstream at once, as with Gym alone; none
    waited for a connection to the upstream or to the owner; every reward 1.0."""
    a: BridgeProcess = spawn_bridge(["--upstream-url", slow_upstream])
    b: BridgeProcess = spawn_bridge(["--upstream-url", slow_upstream])
    tokens = await seed_all([a.url, b.url], ROLLOUTS)
    in_flight(slow_upstream, reset=True)
    before = [waits(bridge, pool)[0] for bridge in (a, b) for pool in ("upstream", "peers")]

    results, _ = await call_all([b.url, a.url], tokens)

    assert [waits(bridge, pool)[0] for bridge in (a, b) for pool in ("upstream", "peers")] == before
    rewards = await verify_all([a.url, b.url], tokens)

    failures = [r for r in results if isinstance(r, BaseException) or r.get("isError")]
    assert not failures, f"{len(failures)} of {ROLLOUTS} calls failed, first: {failures[:2]}"
    assert rewards == [1.0] * ROLLOUTS
    assert in_flight(slow_upstream)["peak"] == ROLLOUTS
    for bridge in (a, b):
        assert metric(bridge, "gym_mcp_bridge_forwarded_total", outcome="relayed") == ROLLOUTS / 2
        limits = bridge.health()["connections"]
        # the upstream's adaptive pool starts at 256, past the 150 calls each replica owns
        assert limits["peers"]["limit"] >= ROLLOUTS and limits["upstream"]["limit"] >= ROLLOUTS / 2
        assert limits["upstream"]["queued"] == 0 and limits["peers"]["queued"] == 0


async def test_a_call_running_when_the_grace_period_ends_is_refused_in_gyms_words(
    spawn_bridge: Any, slow_upstream: str
) -> None:
    """SIGTERM on replica A with ``shutdown_grace_s`` 2: three sessions' 60 s calls hold its drain:
    one from the official MCP SDK client at A (the fast path), one at A whose repeated header sends
    it through the SDK's own handler, one over REST through replica B (forwarded to A). A neighbour
    session on A calls and verifies meanwhile: served, exact. When the grace period is over, each
    held call is answered with its session's loss in Gym's words (an ``isError`` result, a JSON-RPC
    error with its id, a 409 relayed by B), not dropped and not a bare 500; A exits by itself with
    no traceback in its log."""
    a: BridgeProcess = spawn_bridge(
        ["--upstream-url", slow_upstream], env={"GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S": "2"}
    )
    b: BridgeProcess = spawn_bridge(["--upstream-url", slow_upstream])
    held_fast, held_sdk, held_rest, neighbour = [await seed(a.url) for _ in range(4)]

    async def sdk_client() -> Any:
        async with mcp_client(f"{a.url}/mcp", held_fast) as client:
            return await client.call_tool("slow_step", {"seconds": 60})

    repeated = {**CALL_HEADERS, HEADER: held_sdk}  # post_once sends its own content-type too
    held = asyncio.gather(
        sdk_client(),
        post_once(a.url, "/mcp", rpc_call("slow_step", {"seconds": 60}, 7), repeated),
        post_once(b.url, "/slow_step", {"seconds": 60}, {HEADER: held_rest}),
    )
    await asyncio.sleep(1)
    assert a.proc is not None
    a.proc.send_signal(signal.SIGTERM)
    assert (await call(a.url, neighbour, 0.2))["structuredContent"] == {"slept": 0.2, "count": 1}
    assert await verify(a.url, neighbour) == 1.0

    fast, (sdk_status, _, sdk_body), (rest_status, _, rest_body) = await held
    lost = "this replica stopped while the request was running"
    assert fast.is_error and lost in text_of(fast), text_of(fast)
    assert (fast.meta or {}).get("failure_kind") == "session_lost", fast
    error = orjson.loads(sdk_body)
    assert sdk_status == 200 and error["id"] == 7 and lost in error["error"]["message"], sdk_body[:500]
    assert error["error"]["data"]["failure_kind"] == "session_lost", error
    refused = orjson.loads(rest_body)
    assert rest_status == 409 and lost in refused["detail"], rest_body[:500]
    assert refused["failure_kind"] == "session_lost" and refused["terminal"] is False, refused
    assert a.proc.wait(30) == 0
    assert "ended with 3 sessions unfinished" in a.log() and "Traceback" not in a.log(), a.log()[-3000:]
