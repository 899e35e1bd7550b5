"""A replica told to stop (SIGTERM) in the middle of rollouts: it drains the sessions it holds, and a
replica that comes back under the same name refuses its predecessor's sessions, naming why.

Real parts: two bridges in child processes (replicas A and B, managed mode, each with its own Gym
counter server), the official MCP SDK client, and Gym's own ``/verify`` deciding each reward (the
counter's value against ``expected_count``). Each rollout seeds, then makes calls with "model time"
between them, then verifies; some reach A directly (MCP at the seed's URL), some through B (REST,
forwarded to A). A gets SIGTERM while they run.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import (
    HEADER,
    BridgeProcess,
    counter_row,
    free_port,
    mcp_client,
    pid_alive,
    refused_call,
)
from tests.fixtures.helpers import claims_of, gym_response, metric

pytestmark = pytest.mark.anyio

MODEL_S = 1.0  # "model time" before each call
STEPS = (1, 2, 3)


def replicas(spawn_bridge: Any, grace_s: float) -> tuple[BridgeProcess, BridgeProcess]:
    """A (draining after ``grace_s``) and B, started together, each advertising its own URL."""
    port_a, port_b = free_port(), free_port()
    a = spawn_bridge(
        ["--advertise-url", f"http://127.0.0.1:{port_a}"],
        env={"GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S": str(grace_s)},
        port=port_a,
        wait_ready=False,
    )
    b = spawn_bridge(["--advertise-url", f"http://localhost:{port_b}"], port=port_b, wait_ready=False)
    a.wait_ready(240)
    b.wait_ready(240)
    return a, b


async def rollout(seeded: dict[str, Any], via: str | None, initial: int) -> float:
    """Calls with model time between them, then /verify; at the session's own URL over MCP (``via``
    None) or through another replica over REST. The reward Gym's counter gave."""
    async with httpx.AsyncClient(timeout=60) as http:  # a rollout's own cookie jar
        return await _rollout(http, seeded, via, initial)


async def _rollout(http: httpx.AsyncClient, seeded: dict[str, Any], via: str | None, initial: int) -> float:
    token = seeded["mcp"]["headers"][HEADER]
    if via is None:
        async with mcp_client(seeded["mcp"]["url"], token) as client:
            for count in STEPS:
                await asyncio.sleep(MODEL_S)
                result = await client.call_tool("increment_counter", {"count": count})
                assert not result.is_error, result
        base = seeded["mcp"]["url"].removesuffix("/mcp")
    else:
        for count in STEPS:
            await asyncio.sleep(MODEL_S)
            called = await http.post(
                f"{via}/increment_counter", json={"count": count}, headers={HEADER: token}
            )
            assert called.status_code == 200, called.text
        base = via
    body = {**counter_row(initial, initial + sum(STEPS)), "response": gym_response()}
    verified = await http.post(f"{base}/verify", json=body, headers={HEADER: token})
    assert verified.status_code == 200, verified.text
    return float(verified.json()["reward"])


async def test_sigterm_drains_the_sessions_held_then_exits_by_itself(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    a, b = replicas(spawn_bridge, grace_s=60)
    upstream_pid = a.health()["upstream"]["pid"]
    async with httpx.AsyncClient(timeout=60) as http:
        plan = []  # (seeded, via, initial): A's sessions at A and through B, and B's own
        for i, (owner, via) in enumerate(
            [(a, None), (a, None), (a, b.url), (a, b.url), (b, None), (b, a.url)]
        ):
            plan.append((owner.seed(counter_row(10 * i)), via, 10 * i))
        runs = [asyncio.ensure_future(rollout(*p)) for p in plan]
        await asyncio.sleep(MODEL_S / 2)
        signalled = time.monotonic()
        assert a.proc is not None
        a.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)

        ready = await http.get(f"{a.url}/readyz")
        assert ready.status_code == 503 and ready.json()["reason"].startswith("draining: "), ready.text
        refused = await http.post(f"{a.url}/seed_session", json=counter_row(1))
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "2"
        assert "this replica received SIGTERM and takes no new sessions" in refused.json()["detail"]
        assert (await http.get(f"{b.url}/readyz")).status_code == 200

        rewards = await asyncio.gather(*runs)
        finished = time.monotonic()
    assert rewards == [1.0] * len(plan), "every rollout A held finished, exactly, directly and via B"
    assert a.proc.wait(10) == 0, a.log()
    exited = time.monotonic()
    assert exited - finished < 3, (
        f"A exits by itself once its last session is done ({exited - finished:.1f}s)"
    )
    assert exited - signalled < 30, "well before the grace period"
    assert "drained in" in a.log() and "unfinished; they are lost" not in a.log(), a.log()
    deadline = time.monotonic() + 10
    while pid_alive(upstream_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(upstream_pid), "the upstream stops after the drain"


async def test_a_session_open_at_the_end_of_the_grace_period_is_named_then_refused(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    a, b = replicas(spawn_bridge, grace_s=3)
    seeded = a.seed(counter_row(7))
    token = seeded["mcp"]["headers"][HEADER]
    sid = claims_of(token)["sid"]
    async with mcp_client(seeded["mcp"]["url"], token) as client:
        assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
    assert a.proc is not None
    a.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert "1 unfinished sessions" in httpx.get(f"{a.url}/readyz").json()["reason"]
    assert metric(a, "gym_mcp_bridge_sessions_active") == 1
    started = time.monotonic()
    assert a.proc.wait(30) == 0
    assert 1.5 < time.monotonic() - started < 10, "it waited for the grace period, not longer"
    assert "ended with 1 sessions unfinished; they are lost" in a.log() and sid in a.log(), a.log()

    # A comes back under the same name: new sessions at once; the old one refused, naming why.
    again: BridgeProcess = spawn_bridge(["--advertise-url", f"http://127.0.0.1:{a.port}"], port=a.port)
    assert again.seed(counter_row(3))["mcp"]["url"] == seeded["mcp"]["url"]
    for url in (again.url, b.url):  # directly, and forwarded by B to the new A
        lost = httpx.post(f"{url}/get_counter_value", json={}, headers={HEADER: token}, timeout=30)
        assert lost.status_code == 409, lost.text
        assert "previous process" in lost.json()["detail"] and sid in lost.json()["detail"], lost.text
        body = {**counter_row(7, 8), "response": gym_response()}
        verify = httpx.post(f"{url}/verify", json=body, headers={HEADER: token}, timeout=30)
        assert verify.status_code == 409 and "reward" not in verify.json(), verify.text
    text = await refused_call(seeded["mcp"]["url"], token)
    assert "previous process" in text and sid in text, text


@pytest.mark.parametrize("signals", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT,)])
def test_a_second_sigterm_or_sigint_stops_at_once(spawn_bridge, signals: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    bridge: BridgeProcess = spawn_bridge([], env={"GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S": "600"})
    upstream_pid = bridge.health()["upstream"]["pid"]
    bridge.seed(counter_row(1))  # never finished: a drain would wait the whole grace period
    assert bridge.proc is not None
    for sig in signals:
        bridge.proc.send_signal(sig)
        time.sleep(0.5)
    started = time.monotonic()
    assert bridge.proc.wait(15) == 0, bridge.log()
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 10
    while pid_alive(upstream_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(upstream_pid), "stopping at once still stops the upstream"
