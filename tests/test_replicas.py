"""Two replicas with one secret and their own advertise URLs, as a StatefulSet runs them: a session's
metadata names the replica that issued it, and a token shown to the other replica is forwarded to
its issuer, which answers (``tests/test_forwarding.py`` has the balancer, the refusals and the
failures). Also: an advertise URL that does not reach the bridge keeps it out of readiness."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row, free_port, mcp_client

pytestmark = pytest.mark.anyio


async def test_a_session_works_on_its_replica_and_through_the_other_one_by_forwarding(
    spawn_bridge,
) -> None:  # type: ignore[no-untyped-def]
    port_a, port_b = free_port(), free_port()
    a: BridgeProcess = spawn_bridge(["--advertise-url", f"http://127.0.0.1:{port_a}"], port=port_a)
    b: BridgeProcess = spawn_bridge(["--advertise-url", f"http://localhost:{port_b}"], port=port_b)
    health_a, health_b = a.health(), b.health()
    assert health_a["advertise_url"] == f"http://127.0.0.1:{port_a}" and health_a["bound"]["port"] == port_a
    assert health_b["advertise_url"] == f"http://localhost:{port_b}" and health_b["bound"]["port"] == port_b
    seed = a.seed(counter_row(40))
    assert seed["mcp"]["url"] == f"http://127.0.0.1:{port_a}/mcp"
    token = seed["mcp"]["headers"][HEADER]
    async with mcp_client(seed["mcp"]["url"], token) as client:
        await client.call_tool("increment_counter", {"count": 2})
    async with mcp_client(f"{b.url}/mcp", token) as client:  # B (localhost) forwards to A (127.0.0.1)
        forwarded = await client.call_tool("increment_counter", {"count": 100})
    assert not forwarded.is_error and forwarded.structured_content == {"success": True}
    value = httpx.post(f"{b.url}/get_counter_value", json={}, headers={HEADER: token}).json()
    assert value == {"count": 142}, "both calls acted on the one session A holds"
    rest = httpx.post(f"{b.url}/verify", json={"trajectory": {"format": "recorded"}}, headers={HEADER: token})
    assert rest.status_code == 200 and rest.json()["_bridge"]["recorded_tool_calls"] == 3, rest.text


def test_misconfigured_advertise_url_is_reported_by_readyz(
    spawn_bridge, counter_bridge: BridgeProcess
) -> None:  # type: ignore[no-untyped-def]
    elsewhere = free_port()
    unreachable: BridgeProcess = spawn_bridge(
        ["--advertise-url", f"http://127.0.0.1:{elsewhere}"], wait_ready=False
    )
    pointing_at_other: BridgeProcess = spawn_bridge(["--advertise-url", counter_bridge.url], wait_ready=False)
    deadline = time.monotonic() + 300
    for bridge in (unreachable, pointing_at_other):
        while not bridge_started(bridge):
            assert time.monotonic() < deadline and bridge.proc and bridge.proc.poll() is None, bridge.log()
            time.sleep(0.2)
    warned = httpx.get(f"{unreachable.url}/readyz", timeout=10)
    assert warned.status_code == 200, "a published port may be unreachable from inside: only a warning"
    assert f"advertise_url http://127.0.0.1:{elsewhere} cannot be reached" in warned.json()["warnings"][0]
    wrong = httpx.get(f"{pointing_at_other.url}/readyz", timeout=10)
    assert wrong.status_code == 503
    assert f"advertise_url {counter_bridge.url} reaches another server" in wrong.json()["reason"]


def bridge_started(bridge: BridgeProcess) -> bool:
    try:
        return bool(httpx.get(f"{bridge.url}/healthz", timeout=2).json()["upstream"]["ready"])
    except httpx.HTTPError:
        return False
