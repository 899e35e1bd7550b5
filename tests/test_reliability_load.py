"""Load, TTL eviction (soak) and the session cap, against Gym's real stateful counter server.

Figures (calls/s, p50/p99, peak RSS of the bridge) are printed; ``docs/reliability.md`` records
them with the machine and the date. Knobs (environment variables):

- ``GYM_MCP_BRIDGE_LOAD_SESSIONS`` (default 1000) and ``GYM_MCP_BRIDGE_LOAD_CALLS`` (default 20);
- ``GYM_MCP_BRIDGE_SOAK_S``: seconds of the soak (opt-in; without it a short three-wave version
  runs, which still proves eviction and a flat RSS).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Iterator
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row, mcp_client, upstream_url
from tests.fixtures.helpers import (
    RawMcpConnection,
    external_bridge,
    metric,
    status_kb,
    wait_for,
)

pytestmark = [pytest.mark.soak, pytest.mark.anyio]

SESSIONS = int(os.environ.get("GYM_MCP_BRIDGE_LOAD_SESSIONS", "1000"))
CALLS = int(os.environ.get("GYM_MCP_BRIDGE_LOAD_CALLS", "20"))
SOAK_S = float(os.environ.get("GYM_MCP_BRIDGE_SOAK_S", "0"))


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n[figures] {line}", flush=True)


@pytest.fixture(scope="module")
def load_bridge(log_dir: Path) -> Iterator[BridgeProcess]:
    """Gym's stateful counter in managed mode, sessions long enough to outlive the test."""
    bridge = BridgeProcess(args=["--session-ttl-s", "1800"]).start(log_dir, timeout=240)
    yield bridge
    bridge.stop()


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds in a thread; ``peak`` in KiB."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(status_kb(self.pid, "VmRSS"))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> int:
        return max(self.samples)


def step(i: int, k: int) -> int:
    return (i + k) % 7 + 1


async def seed_all(url: str, rows: list[dict[str, Any]], concurrency: int = 64) -> list[str]:
    tokens: list[str] = [""] * len(rows)
    limiter = anyio.Semaphore(concurrency)
    # cookies off: a client that sent one seed's upstream cookie with the next seed would re-seed the
    # same upstream session (Gym semantics, passed through unchanged), so each seed goes cookie-less
    jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits, cookies=jar) as http:

        async def one(i: int) -> None:
            async with limiter:
                response = await http.post(f"{url}/seed_session", json=rows[i])
            assert response.status_code == 200, response.text
            tokens[i] = response.json()["mcp"]["headers"][HEADER]

        async with anyio.create_task_group() as tg:
            for i in range(len(rows)):
                tg.start_soon(one, i)
    return tokens


async def run_rollouts(
    url: str, tokens: list[str], calls: int, initial: list[int], sdk_every: int = 10
) -> tuple[dict[int, int], list[float], list[str], float]:
    """Every session at once: ``calls`` increments then one read, over MCP.

    One session in ``sdk_every`` runs on the official MCP SDK client; the others on a light raw
    JSON-RPC client (``RawMcpConnection``), so that on two shared cores the bridge and the Gym
    server are what is measured, not the SDK client's own cost (about 12 ms of CPU per call).
    Returns (value read per session, per-call latencies, errors, wall seconds)."""
    values: dict[int, int] = {}
    latencies: list[float] = []
    errors: list[str] = []
    host, port = url.split("//", 1)[1].rsplit(":", 1)

    async def sdk_rollout(i: int) -> None:
        async with mcp_client(f"{url}/mcp", tokens[i], mode="2026-07-28") as client:
            for k in range(calls):
                began = time.perf_counter()
                result = await client.call_tool("increment_counter", {"count": step(i, k)})
                latencies.append(time.perf_counter() - began)
                if result.is_error:
                    errors.append(f"session {i} call {k}: {result.content}")
            began = time.perf_counter()
            value = await client.call_tool("get_counter_value", {})
            latencies.append(time.perf_counter() - began)
            if value.is_error or value.structured_content is None:
                errors.append(f"session {i} read: {value.content}")
            else:
                values[i] = value.structured_content["count"]

    async def raw_rollout(i: int) -> None:
        async with RawMcpConnection(host, int(port), tokens[i]) as client:
            for k in range(calls):
                began = time.perf_counter()
                result = await client.call_tool("increment_counter", {"count": step(i, k)})
                latencies.append(time.perf_counter() - began)
                if result.get("isError"):
                    errors.append(f"session {i} call {k}: {result}")
            began = time.perf_counter()
            value = await client.call_tool("get_counter_value", {})
            latencies.append(time.perf_counter() - began)
            if value.get("isError") or not isinstance(value.get("structuredContent"), dict):
                errors.append(f"session {i} read: {value}")
            else:
                values[i] = value["structuredContent"]["count"]

    async def rollout(i: int) -> None:
        try:
            await (sdk_rollout(i) if i % sdk_every == 0 else raw_rollout(i))
        except Exception as exc:  # every failure is counted, none hidden
            errors.append(f"session {i}: {describe(exc)}")

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(len(tokens)):
            tg.start_soon(rollout, i)
    return values, latencies, errors, time.perf_counter() - began


def describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] if len(values) > 1 else values[0]


async def test_1000_concurrent_sessions_every_counter_exact(
    load_bridge: BridgeProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_bridge.proc is not None
    pid = load_bridge.proc.pid
    initial = [100_000 * i for i in range(SESSIONS)]
    ok_before = metric(load_bridge, "gym_mcp_bridge_tool_calls_total", outcome="ok")
    rss_idle = status_kb(pid, "VmRSS")
    with RssSampler(pid) as rss:
        tokens = await seed_all(load_bridge.url, [counter_row(v) for v in initial])
        assert len(set(tokens)) == SESSIONS
        values, latencies, errors, wall = await run_rollouts(load_bridge.url, tokens, CALLS, initial)
    assert errors == [], f"{len(errors)} errors, first: {errors[:3]}"
    expected = {i: initial[i] + sum(step(i, k) for k in range(CALLS)) for i in range(SESSIONS)}
    wrong = {i: (values.get(i), expected[i]) for i in expected if values.get(i) != expected[i]}
    assert not wrong, f"{len(wrong)} sessions read a wrong value (got, expected): {list(wrong.items())[:5]}"
    # the bridge's own count agrees: every call served exactly once, none failed
    served = metric(load_bridge, "gym_mcp_bridge_tool_calls_total", outcome="ok") - ok_before
    assert served == SESSIONS * (CALLS + 1)
    assert metric(load_bridge, "gym_mcp_bridge_tool_calls_total", outcome="upstream_error") == 0
    total = SESSIONS * (CALLS + 1)
    report(
        capsys,
        f"load: {SESSIONS} concurrent sessions x ({CALLS} increment_counter + 1 read) over MCP = {total} "
        f"calls in {wall:.1f}s = {total / wall:.0f} calls/s; latency p50 {percentile(latencies, 0.5) * 1000:.0f} ms "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms; bridge RSS idle {rss_idle / 1024:.0f} MiB, "
        f"peak {max(rss.peak, status_kb(pid, 'VmHWM')) / 1024:.0f} MiB; errors 0, wrong values 0",
    )


async def test_sessions_evicted_at_ttl_and_memory_returns(
    load_bridge: BridgeProcess, log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Waves of sessions with a 10 s TTL: after each wave every session is evicted (gauge 0, token
    refused) and the bridge's RSS settles at the same level (no growth wave over wave)."""
    ttl = 10.0
    bridge = external_bridge(log_dir, upstream_url(load_bridge), "--session-ttl-s", str(ttl))
    assert bridge.proc is not None
    pid = bridge.proc.pid
    per_wave = 150
    deadline = time.monotonic() + SOAK_S if SOAK_S else None
    settled: list[int] = []
    wave = 0
    while True:
        tokens = await seed_all(bridge.url, [counter_row(7) for _ in range(per_wave)])
        values, _, errors, _ = await run_rollouts(bridge.url, tokens, 3, [7] * per_wave)
        assert errors == [], errors[:3]
        assert values == {i: 7 + sum(step(i, k) for k in range(3)) for i in range(per_wave)}
        assert metric(bridge, "gym_mcp_bridge_sessions_active") == per_wave
        # past the TTL the sweeper (every 5 s) evicts the wave
        assert wait_for(lambda: metric(bridge, "gym_mcp_bridge_sessions_active") == 0, ttl + 15)
        assert bridge.health()["sessions_active"] == 0
        async with mcp_client(f"{bridge.url}/mcp", tokens[0], mode="2026-07-28") as client:
            refused = await client.call_tool("increment_counter", {"count": 1})
        assert refused.is_error and "expired" in refused.content[0].text  # type: ignore[union-attr]
        settled.append(status_kb(pid, "VmRSS"))
        wave += 1
        if (deadline is None and wave >= 3) or (deadline is not None and time.monotonic() > deadline):
            break
    first, last = settled[0], settled[-1]
    report(
        capsys,
        f"ttl eviction: {wave} waves x {per_wave} sessions (TTL {ttl:g}s), RSS after each wave's eviction "
        f"(MiB): {[round(s / 1024, 1) for s in settled]}",
    )
    # memory returns: RSS after the last wave is within 10% (+8 MiB) of RSS after the first
    assert last <= first * 1.10 + 8 * 1024, settled
    bridge.stop()


async def test_session_cap_503_with_retry_after_and_existing_sessions_keep_working(
    load_bridge: BridgeProcess, log_dir: Path
) -> None:
    bridge = external_bridge(log_dir, upstream_url(load_bridge), "--max-sessions", "5")
    jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))  # one rollout per seed, as Gym does
    async with httpx.AsyncClient(base_url=bridge.url, timeout=30, cookies=jar) as http:
        tokens = []
        for i in range(5):
            seeded = await http.post("/seed_session", json=counter_row(10 * i))
            assert seeded.status_code == 200
            tokens.append(seeded.json()["mcp"]["headers"][HEADER])
        refused = await http.post("/seed_session", json=counter_row(0))
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) > 0
        assert "session cap reached" in refused.json()["detail"]

        # every existing session keeps working, concurrently
        async def use(i: int) -> None:
            async with mcp_client(f"{bridge.url}/mcp", tokens[i]) as client:
                assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
                value = await client.call_tool("get_counter_value", {})
                assert value.structured_content == {"count": 10 * i + 1}

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(use, i)
        # closing one frees a slot
        closed = await http.post("/close_session", json={}, headers={HEADER: tokens[0]})
        assert closed.status_code == 200, closed.text
        assert (await http.post("/seed_session", json=counter_row(0))).status_code == 200
        assert (await http.post("/seed_session", json=counter_row(0))).status_code == 503
    bridge.stop()
