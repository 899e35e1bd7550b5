"""The upstream pool's adaptive gate (``bridge.upstream.gate``): a queue of calls grows the pool while
the upstream keeps up, and holds it where it is while the upstream's own loop is the bottleneck.

Against a real Gym resources server (the fault fixture, started with the bridge's boot script):
``slow_tool`` sleeps (a test suite, a sandbox: the server idle meanwhile), so 200 calls past a floor
of 8 all reach it within a few probe rounds; ``busy_tool`` holds the server's loop (a synchronous
scorer), so the lag probe finds it behind and the pool stays at its floor. Then the gate alone, with
its probe answering a fixed verdict: the limit doubles per round up to the ceiling, never grows on
"lagging", falls back to the floor once the load is gone, and a waiter cancelled (a probe's bounded
wait, a client gone) gives its place back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.upstream.gate import PROBE_S, Gate
from bridge.upstream.transport import KeepAlivePool
from tests.fixtures.bridges import GYM_PYTHON, UpstreamProcess, boot_upstream, wait_for_upstream
from tests.fixtures.helpers import FAULT_SPEC, fault_env

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def fault_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    folder: Path = tmp_path_factory.mktemp("gate-upstream")
    port_file, log = folder / "port.json", folder / "upstream.log"
    proc = boot_upstream(GYM_PYTHON, FAULT_SPEC, port_file, log, env={**os.environ, **fault_env()})
    try:
        url = wait_for_upstream(proc, port_file, log, time.monotonic() + 120)
        yield UpstreamProcess(proc=proc, url=url, pid=proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def calls(pool: KeepAlivePool, tool: str, seconds: float, n: int) -> tuple[list[int], int]:
    """``n`` calls at once; (their statuses, the most connections in use at any sample)."""
    body = f'{{"seconds": {seconds}}}'.encode()
    most = 0

    async def sample() -> None:
        nonlocal most
        while True:
            most = max(most, pool.busy)
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        answers = await asyncio.gather(*(pool.post(f"/{tool}", body, JSON, None) for _ in range(n)))
    finally:
        sampler.cancel()
    return [status for status, _, _ in answers], most


async def test_a_queue_of_sleeping_calls_grows_the_pool_to_hold_them_all(
    fault_upstream: UpstreamProcess,
) -> None:
    pool = KeepAlivePool(fault_upstream.url, max_connections=8, expiry_s=30, connect_timeout_s=5, ceiling=512)
    try:
        statuses, most = await calls(pool, "slow_tool", 3.0, 200)
    finally:
        pool.close()
    assert statuses == [200] * 200
    # A fixed pool of 8 would have held 8 (and taken 75 s); grown, all 200 were in the upstream at once.
    assert most == 200, most


async def test_calls_that_hold_the_upstreams_loop_keep_the_pool_at_its_floor(
    fault_upstream: UpstreamProcess,
) -> None:
    pool = KeepAlivePool(fault_upstream.url, max_connections=4, expiry_s=30, connect_timeout_s=5, ceiling=512)
    try:
        statuses, most = await calls(pool, "busy_tool", 0.1, 40)
    finally:
        pool.close()
    assert statuses == [200] * 40
    # 4 s of the server's CPU in all: unbounded growth would have had all 40 in it within a second
    assert most <= 8, most


async def fill(gate: Gate, n: int) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(gate.acquire()) for _ in range(n)]
    await asyncio.sleep(0)
    return tasks


async def test_the_limit_doubles_per_round_while_the_upstream_keeps_up() -> None:
    async def keeps_up() -> bool:
        return False

    gate = Gate(4, 32, keeps_up)
    tasks = await fill(gate, 40)
    assert gate.held == 4 and gate.limit == 4
    await asyncio.sleep(PROBE_S * 1.5)
    assert gate.limit == 8 and gate.held == 8
    await asyncio.sleep(PROBE_S * 3)
    assert gate.limit == 32 and gate.held == 32  # the ceiling, not past it
    for _ in range(32):
        gate.release()
    await asyncio.gather(*tasks)
    assert gate.held == 8 and gate.limit == 32  # the rest got their places as places came free
    for _ in range(8):
        gate.release()
    assert gate.held == 0 and gate.limit == 4  # the load is gone: back at the floor


async def test_the_limit_never_grows_while_the_upstream_lags() -> None:
    probes = 0

    async def lags() -> bool:
        nonlocal probes
        probes += 1
        return True

    gate = Gate(4, 32, lags)
    tasks = await fill(gate, 20)
    await asyncio.sleep(PROBE_S * 4.5)
    assert probes >= 3 and gate.limit == 4 and gate.held == 4
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    gate.close()


async def test_a_cancelled_waiter_gives_its_place_back() -> None:
    gate = Gate(1)  # fixed: no probe
    await gate.acquire()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await gate.acquire()
    waiter = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()
    await waiter
    assert gate.held == 1 and not gate._waiters  # the timed-out waiter took no place
