"""The bridge's upstream HTTP client, measured against the off-the-shelf ones it could use instead.

One POST of ``/get_counter_value`` with a seeded session's cookie to the real Gym upstream, made the
way the bridge makes it (status, raw headers and body bytes back), sequentially, through:

* ``pool``: the bridge's hand-written keep-alive pool (``bridge.upstream.KeepAlivePool``, httptools);
* ``aiohttp``: an ``aiohttp.ClientSession`` (llhttp parser, pooled keep-alive, no cookie jar);
* ``httpx``: an ``httpx.AsyncClient`` configured as ``Upstream.client`` is (the https/probe path).

Repeats are interleaved (the order rotates each repeat) so noise on a shared machine hits every
client alike; each repeat yields p50 and mean latency and this process's CPU per call, and the
differences to ``pool`` are taken per repeat (paired) before the median. The issue's decision rule:
switch to aiohttp when it costs at most ``THRESHOLD_MS`` per call more than the pool, in both mean
latency and CPU; otherwise keep the pool.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import orjson

from benchmarks.clients import seed_body
from benchmarks.procs import BenchError
from bridge.upstream.transport import KeepAlivePool

CLIENTS = ["pool", "aiohttp", "httpx"]
THRESHOLD_MS = 0.05
_PATH = "/get_counter_value"
_BODY = b"{}"

Post = Callable[[], Awaitable[tuple[int, Any, bytes]]]


@dataclass
class ClientRun:
    client: str
    repeat: int
    calls: int
    p50_ms: float
    mean_ms: float
    cpu_ms_per_call: float


async def _seed(url: str) -> dict[str, str]:
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
        http.post(
            f"{url}/seed_session", data=seed_body(5), headers={"content-type": "application/json"}
        ) as r,
    ):
        if r.status != 200:
            raise BenchError(f"upstream clients: seed answered {r.status}")
        cookie = "; ".join(c.split(";", 1)[0] for c in r.headers.getall("set-cookie", []))
    return {"content-type": "application/json", "cookie": cookie}


async def _run(post: Post, calls: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    append, clock = latencies.append, time.perf_counter
    cpu0 = time.process_time()
    for _ in range(calls):
        t0 = clock()
        status, _, body = await post()
        append(clock() - t0)
        if status != 200:
            raise BenchError(f"upstream clients: {_PATH} answered {status}: {body[:200]!r}")
    return latencies, time.process_time() - cpu0


async def compare(
    url: str, calls: int, repeats: int, warmup: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Run the comparison against the upstream at ``url``; the runs, the summary and the verdict."""
    headers = await _seed(url)
    pool = KeepAlivePool(url, max_connections=512, expiry_s=4.0, connect_timeout_s=5.0)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=512, keepalive_timeout=4.0),
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=30.0, connect=5.0),
    )
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(30.0, connect=5.0),
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=256, keepalive_expiry=60),
    )

    async def via_pool() -> tuple[int, Any, bytes]:
        return await pool.post(_PATH, _BODY, headers, 30.0)

    async def via_aiohttp() -> tuple[int, Any, bytes]:
        async with session.post(f"{url}{_PATH}", data=_BODY, headers=headers) as response:
            return response.status, response.raw_headers, await response.read()

    async def via_httpx() -> tuple[int, Any, bytes]:
        response = await client.post(f"{url}{_PATH}", content=_BODY, headers=headers)
        return response.status_code, response.headers.raw, response.content

    posts: dict[str, Post] = {"pool": via_pool, "aiohttp": via_aiohttp, "httpx": via_httpx}
    runs: list[ClientRun] = []
    try:
        answers = {name: orjson.loads((await post())[2]) for name, post in posts.items()}
        if len({orjson.dumps(a) for a in answers.values()}) != 1:
            raise BenchError(f"upstream clients disagree: {answers}")
        for post in posts.values():
            await _run(post, warmup)
        for repeat in range(repeats):
            order = CLIENTS[repeat % len(CLIENTS) :] + CLIENTS[: repeat % len(CLIENTS)]
            for name in order:
                latencies, cpu = await _run(posts[name], calls)
                run = ClientRun(
                    client=name,
                    repeat=repeat,
                    calls=calls,
                    p50_ms=statistics.median(latencies) * 1e3,
                    mean_ms=statistics.fmean(latencies) * 1e3,
                    cpu_ms_per_call=cpu / calls * 1e3,
                )
                runs.append(run)
                log(
                    f"bench: upstream client r{repeat + 1} {name:<8} p50 {run.p50_ms:.3f} ms "
                    f"mean {run.mean_ms:.3f} ms CPU {run.cpu_ms_per_call:.3f} ms/call"
                )
    finally:
        pool.close()
        await session.close()
        await client.aclose()
    return summarize(runs, calls, repeats)


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[ClientRun], calls: int, repeats: int) -> dict[str, Any]:
    metrics = ("p50_ms", "mean_ms", "cpu_ms_per_call")
    by = {(r.client, r.repeat): r for r in runs}
    clients = {
        name: {m: _spread([getattr(r, m) for r in runs if r.client == name]) for m in metrics}
        for name in CLIENTS
    }
    over_pool = {
        name: {
            m: _spread([getattr(by[name, i], m) - getattr(by["pool", i], m) for i in range(repeats)])
            for m in metrics
        }
        for name in CLIENTS
        if name != "pool"
    }
    extra = over_pool["aiohttp"]
    switch = extra["mean_ms"]["median"] <= THRESHOLD_MS and extra["cpu_ms_per_call"]["median"] <= THRESHOLD_MS
    return {
        "path": _PATH,
        "calls_per_repeat": calls,
        "repeats": repeats,
        "clients": clients,
        "over_pool_ms": over_pool,
        "threshold_ms": THRESHOLD_MS,
        "verdict": "switch to aiohttp" if switch else "keep the pool",
        "runs": [r.__dict__ for r in runs],
    }


def table(result: dict[str, Any]) -> str:
    def cell(s: dict[str, float], signed: bool = False) -> str:
        f = "+.3f" if signed else ".3f"
        return f"{format(s['median'], f)} ({format(s['min'], f)}..{format(s['max'], f)})"

    lines = [
        f"upstream client, one POST {result['path']} with a session cookie, sequential: "
        f"median (min..max) of {result['repeats']} interleaved repeats x {result['calls_per_repeat']} calls",
        f"{'client':<9} {'p50 ms':>22} {'mean ms':>22} {'CPU ms/call':>22}",
    ]
    for name, m in result["clients"].items():
        lines.append(
            f"{name:<9} {cell(m['p50_ms']):>22} {cell(m['mean_ms']):>22} {cell(m['cpu_ms_per_call']):>22}"
        )
    for name, m in result["over_pool_ms"].items():
        lines.append(
            f"{name + '-pool':<9} {cell(m['p50_ms'], True):>22} {cell(m['mean_ms'], True):>22} "
            f"{cell(m['cpu_ms_per_call'], True):>22}"
        )
    extra = result["over_pool_ms"]["aiohttp"]
    lines.append(
        f"decision (switch if aiohttp costs <= {result['threshold_ms']} ms/call more than the pool, mean and "
        f"CPU): aiohttp {extra['mean_ms']['median']:+.3f} ms mean, {extra['cpu_ms_per_call']['median']:+.3f} "
        f"ms CPU per call -> {result['verdict']}"
    )
    return "\n".join(lines)
