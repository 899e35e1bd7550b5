"""What ``benchmarks.run`` measures besides calls: idle sessions (RSS per session) and startup --
the bridge restarted against a running upstream, started together with one, and ``serve`` cold
(managed upstream). Each function starts and stops its own bridge."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import procs
from benchmarks.clients import McpRawClient
from benchmarks.procs import Proc


async def gather_limited(factories: list[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(factory: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await factory()

    return list(await asyncio.gather(*(one(f) for f in factories)))


async def idle_sessions(
    workdir: Path, upstream: Proc, http: aiohttp.ClientSession, count: int, ready_s: list[float]
) -> dict[str, Any]:
    """A fresh bridge: RSS before and after seeding ``count`` sessions that then sit idle."""
    bridge = procs.start_bridge(workdir, upstream.url, name="bridge-idle")
    try:
        ready_s.append(float(bridge.extra["ready_s"]))  # type: ignore[arg-type]
        client = McpRawClient(http, bridge.url, "bridge-idle")
        warm = await gather_limited([lambda: client.seed(1) for _ in range(50)], 16)
        for session in warm[:10]:
            await client.call(session, "increment_counter", {"count": 1})
        await asyncio.sleep(0.5)
        before = bridge.memory()["rss_kb"]
        up_before = upstream.memory()["rss_kb"]
        opened = await gather_limited([lambda: client.seed(5) for _ in range(count)], 16)
        await asyncio.sleep(0.5)
        after = bridge.memory()
        # every idle session still answers (isolation held while it waited)
        sample = opened[:: max(1, count // 20)]
        finals = await gather_limited([functools.partial(client.counter, s) for s in sample], 16)
        return {
            "sessions": count,
            "bridge_rss_before_mb": before / 1024,
            "bridge_rss_after_mb": after["rss_kb"] / 1024,
            "bridge_rss_growth_bytes_per_session": (after["rss_kb"] - before) * 1024 / count,
            "bridge_peak_rss_mb": after["hwm_kb"] / 1024,
            "upstream_rss_growth_bytes_per_session": (upstream.memory()["rss_kb"] - up_before) * 1024 / count,
            "correct": all(f == 5 for f in finals),
        }
    finally:
        bridge.stop()


def restarts(workdir: Path, upstream: Proc, repeats: int, ready_s: list[float]) -> None:
    """The bridge started ``repeats`` times against the running upstream: spawn to ready."""
    for i in range(repeats):
        bridge = procs.start_bridge(workdir, upstream.url, name=f"bridge-start-{i}")
        ready_s.append(float(bridge.extra["ready_s"]))  # type: ignore[arg-type]
        bridge.stop()


def co_start(workdir: Path, repeats: int, log: Callable[[str], None]) -> list[dict[str, float]]:
    """Upstream and bridge spawned together: how long after the upstream the bridge is ready."""
    out = []
    for i in range(repeats):
        upstream_s, bridge_s = procs.start_together(workdir, f"together-{i}")
        out.append({"upstream_ready_s": upstream_s, "bridge_ready_s": bridge_s})
        log(f"bench: started together: upstream ready {upstream_s:.2f}s, bridge ready {bridge_s:.2f}s")
    return out


def cold_start(workdir: Path) -> float:
    """``serve`` with a managed upstream, spawn to ready."""
    bridge = procs.start_bridge(workdir, None, name="bridge-cold")
    try:
        return float(bridge.extra["ready_s"])  # type: ignore[arg-type]
    finally:
        bridge.stop()
