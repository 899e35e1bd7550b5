"""Faults: a slow, failing, disconnecting or dying upstream, clients that hang up, SIGTERM mid-load.

The upstream is a real Gym resources server: ``tests/fixtures/fault_injection_server.py`` (Gym's
stateful counter plus tools that sleep, answer 500, answer invalid JSON, drop the connection),
loaded into the Gym environment by ``module:Class``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, mcp_client, pid_alive, running_bridge, upstream_url
from tests.fixtures.fault_texts import FAIL_500_TEXT, INVALID_JSON_TEXT
from tests.fixtures.helpers import (
    ESTABLISHED,
    FAULT_SPEC,
    MCP_HEADERS,
    bridge_log_problems,
    children_of,
    fault_env,
    metric,
    open_fds,
    openapi_row,
    rpc_call,
    seed,
    shared_fault_bridge,
    tcp_connections,
    text_of,
    upstream_counts,
    wait_for,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def fault(log_dir: Path) -> BridgeProcess:
    """Shared managed bridge on the fault fixture, ``--tool-timeout-s 2``."""
    return shared_fault_bridge(log_dir)


@pytest.fixture(scope="module")
def doomed(log_dir: Path) -> Iterator[BridgeProcess]:
    """A managed bridge of its own: its upstream gets killed, then the bridge gets SIGTERM."""
    with running_bridge(log_dir, "--resources-server", FAULT_SPEC, **fault_env()) as bridge:
        yield bridge


async def test_slow_upstream_times_out_at_the_budget_while_other_sessions_stay_responsive(
    fault: BridgeProcess,
) -> None:
    slow, busy = seed(fault, openapi_row(0)), seed(fault, openapi_row(100))
    timeouts_before = metric(fault, "gym_mcp_bridge_tool_calls_total", tool="slow_tool", outcome="timeout")
    marks: dict[str, float] = {}
    busy_latencies: list[float] = []

    async def stuck() -> None:
        async with mcp_client(f"{fault.url}/mcp", slow) as client:
            began = time.monotonic()
            result = await client.call_tool("slow_tool", {"seconds": 30})
            marks["slow_elapsed"] = time.monotonic() - began
            marks["slow_done"] = time.monotonic()
            assert result.is_error
            assert "did not answer /slow_tool within 2s" in text_of(result)

    async def responsive() -> None:
        await anyio.sleep(0.2)  # the slow call is in flight
        async with mcp_client(f"{fault.url}/mcp", busy) as client:
            for _ in range(10):
                began = time.monotonic()
                assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
                busy_latencies.append(time.monotonic() - began)
            value = await client.call_tool("get_counter_value", {})
        assert value.structured_content == {"count": 110}
        marks["busy_done"] = time.monotonic()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stuck)
        tg.start_soon(responsive)
    # the timeout fires at the 2 s budget (not at the upstream's 30 s), and the other session's ten
    # calls were all served while the slow one was waiting
    assert 1.9 <= marks["slow_elapsed"] < 6, marks
    assert marks["busy_done"] < marks["slow_done"], (marks, busy_latencies)
    assert metric(fault, "gym_mcp_bridge_tool_calls_total", tool="slow_tool", outcome="timeout") == (
        timeouts_before + 1
    )


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("fail_500", [FAIL_500_TEXT]),  # the upstream's body as a model reads it over plain HTTP
        ("close_connection", ["upstream failed on /close_connection"]),
    ],
)
async def test_failing_upstream_becomes_is_error_with_its_text(
    fault: BridgeProcess, tool: str, expected: list[str]
) -> None:
    token = seed(fault, openapi_row(0))
    async with mcp_client(f"{fault.url}/mcp", token) as client:
        result = await client.call_tool(tool, {})
        assert result.is_error
        for part in expected:
            assert part in text_of(result)
        # nothing crashed: the same session keeps working
        assert not (await client.call_tool("increment_counter", {"count": 3})).is_error
        assert (await client.call_tool("get_counter_value", {})).structured_content == {"count": 3}
    assert fault.health()["status"] == "ok"
    assert bridge_log_problems(fault.log()) == []


async def test_invalid_json_from_upstream_is_an_error_with_its_text(fault: BridgeProcess) -> None:
    """HTTP 200 whose JSON body does not parse: over MCP an isError result carrying exactly what the
    upstream sent, no structured content invented; nothing crashes."""
    token = seed(fault, openapi_row(0))
    async with mcp_client(f"{fault.url}/mcp", token) as client:
        result = await client.call_tool("invalid_json", {})
        assert result.is_error
        assert text_of(result) == f"upstream answered HTTP 200 with invalid JSON: {INVALID_JSON_TEXT}"
        assert result.structured_content is None
        assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
    # over REST the upstream's answer is passed through byte for byte
    response = httpx.post(f"{fault.url}/invalid_json", json={}, headers={HEADER: token}, timeout=10)
    assert (response.status_code, response.text) == (200, INVALID_JSON_TEXT)
    # a dropped connection over REST is a 502 naming the failure
    dropped = httpx.post(f"{fault.url}/close_connection", json={}, headers={HEADER: token}, timeout=10)
    assert dropped.status_code == 502
    assert "upstream failed on /close_connection" in dropped.json()["detail"]


def _bridge_conns(bridge: BridgeProcess, upstream_port: int) -> tuple[int, int]:
    """(client connections into the bridge, bridge connections to the upstream), established."""
    assert bridge.proc is not None
    conns = [c for c in tcp_connections(bridge.proc.pid) if c[2] == ESTABLISHED]
    return (
        sum(1 for local, _, _ in conns if local == bridge.port),
        sum(1 for _, remote, _ in conns if remote == upstream_port),
    )


async def test_clients_hanging_up_mid_call_leak_no_connections_or_fds(fault: BridgeProcess) -> None:
    assert fault.proc is not None
    pid = fault.proc.pid
    upstream_port = int(upstream_url(fault).rsplit(":", 1)[1])
    tokens = [seed(fault, openapi_row(0)) for _ in range(20)]
    after_round: list[tuple[int, int, int]] = []
    for _ in range(3):
        # 20 clients each start a 1.5 s call and hang up after 0.3 s
        async def hang_up(token: str) -> None:
            # hang up 0.3 s into the call; connecting may take longer on a loaded machine
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=0.3)) as http:
                with pytest.raises(httpx.ReadTimeout):
                    await http.post(
                        f"{fault.url}/mcp",
                        json=rpc_call("slow_tool", {"seconds": 1.5}),
                        headers={**MCP_HEADERS, HEADER: token},
                    )

        async with anyio.create_task_group() as tg:
            for token in tokens:
                tg.start_soon(hang_up, token)
        await anyio.sleep(2.5)  # every abandoned upstream call has ended by now
        clients, upstream = _bridge_conns(fault, upstream_port)
        after_round.append((clients, upstream, open_fds(pid)))
    # no client connection survives its client; upstream connections are the keep-alive pool, and
    # nothing grows round over round (60 abandoned calls in all)
    assert all(clients == 0 for clients, _, _ in after_round), after_round
    assert after_round[-1][1] <= max(after_round[0][1], 20), after_round
    assert after_round[-1][2] <= after_round[0][2] + 5, after_round
    # and the bridge still answers at once
    async with mcp_client(f"{fault.url}/mcp", tokens[0]) as client:
        assert not (await client.call_tool("increment_counter", {"count": 1})).is_error


async def test_upstream_killed_mid_rollout_sessions_lost_then_recovered(doomed: BridgeProcess) -> None:
    old = seed(doomed, openapi_row(5))
    upstream_pid = doomed.health()["upstream"]["pid"]
    assert upstream_pid and pid_alive(upstream_pid)
    outcome: dict[str, object] = {}

    async def in_flight() -> None:
        async with mcp_client(f"{doomed.url}/mcp", old) as client:
            result = await client.call_tool("slow_tool", {"seconds": 20})
            outcome["is_error"], outcome["text"] = result.is_error, text_of(result)

    async with anyio.create_task_group() as tg:
        tg.start_soon(in_flight)
        await anyio.sleep(1.0)
        os.kill(upstream_pid, signal.SIGKILL)
        not_ready: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not not_ready:
            response = httpx.get(f"{doomed.url}/readyz", timeout=5)
            if response.status_code == 503:
                not_ready.append(response.json()["reason"])
            await anyio.sleep(0.05)
    # the in-flight call ended with an MCP error naming the cause
    assert outcome["is_error"] is True
    assert "died (killed by SIGKILL)" in str(outcome["text"]), outcome
    # readiness said why, then came back after the automatic restart
    assert not_ready and "exited with code -9" in not_ready[0], not_ready
    assert wait_for(lambda: httpx.get(f"{doomed.url}/readyz", timeout=5).status_code == 200, 180)
    status = doomed.health()["upstream"]
    assert status["restarts"] == 1 and status["pid"] != upstream_pid
    # the old session is lost, on MCP and on verify, and never silently re-created
    async with mcp_client(f"{doomed.url}/mcp", old) as client:
        lost = await client.call_tool("increment_counter", {"count": 1})
    assert lost.is_error and "session lost" in text_of(lost)
    verify = httpx.post(
        f"{doomed.url}/verify",
        json={"response": {"output": []}, "expected_count": 5},
        headers={HEADER: old},
        timeout=30,
    )
    assert verify.status_code == 409 and "session lost" in verify.json()["detail"]
    # a new session works on the new upstream
    fresh = seed(doomed, openapi_row(40))
    async with mcp_client(f"{doomed.url}/mcp", fresh) as client:
        assert not (await client.call_tool("increment_counter", {"count": 2})).is_error
        assert (await client.call_tool("get_counter_value", {})).structured_content == {"count": 42}


async def test_sigterm_during_load_drains_in_flight_calls_then_exits_clean(doomed: BridgeProcess) -> None:
    """Runs after the kill test on the same bridge (module order): 30 calls in flight, SIGTERM."""
    assert doomed.proc is not None
    bridge_pid = doomed.proc.pid
    descendants = children_of(bridge_pid)
    assert descendants, "the managed upstream runs as the bridge's child"
    tokens = [seed(doomed, openapi_row(0)) for _ in range(30)]
    upstream = upstream_url(doomed)
    arrived_before = upstream_counts(upstream).get("POST /slow_tool", 0)
    answers: list[tuple[int, dict[str, object]]] = []

    async def call(token: str) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(
                f"{doomed.url}/mcp",
                json=rpc_call("slow_tool", {"seconds": 5}),
                headers={**MCP_HEADERS, HEADER: token},
            )
            answers.append((response.status_code, response.json()))

    async with anyio.create_task_group() as tg:
        for token in tokens:
            tg.start_soon(call, token)
        # SIGTERM once all 30 are in flight at the upstream (counted there)
        arrived = await anyio.to_thread.run_sync(
            lambda: wait_for(
                lambda: upstream_counts(upstream).get("POST /slow_tool", 0) - arrived_before >= 30,
                4,
                0.05,
            )
        )
        assert arrived, upstream_counts(upstream)
        doomed.proc.send_signal(signal.SIGTERM)
    assert len(answers) == 30
    for status, body in answers:
        assert status == 200, body
        result = body["result"]
        assert isinstance(result, dict) and not result.get("isError"), body
        assert result.get("structuredContent") == {"slept": 5}, body
    assert doomed.proc.wait(timeout=30) == 0
    assert wait_for(lambda: not any(pid_alive(p) for p in descendants), 10), [
        p for p in descendants if pid_alive(p)
    ]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{doomed.url}/healthz", timeout=2)
    assert bridge_log_problems(doomed.log()) == []
