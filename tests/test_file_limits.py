"""Thousands of rollouts in flight under a small open-file limit, each request on a connection of its
own, against two real bridge processes over Gym's real stateful counter.

Each bridge starts with a soft ``RLIMIT_NOFILE`` of 256 (``open_files``) and raises it to its hard
limit (``bridge.limits``): its log says so, ``/proc/<pid>/limits`` shows it, for the bridge and for
the Gym server it spawned. Then every rollout runs at once: ``POST /seed_session`` on one replica,
MCP ``initialize`` and two ``tools/call increment_counter`` on it or the other one (forwarded to the
owner), ``POST /verify`` on either: no connection error, no 5xx, and every verify answer equals what
Gym alone (a bare server, no bridge) gives for the same row and calls. A bridge whose hard limit is
too small to raise into keeps connections waiting in its listen queue and its pools' queues and says
so in its log, and still serves every rollout exactly; an ``accept`` that fails with EMFILE is
logged and its connection served once a descriptor is free, never reset. No timed assertion.

Knobs, for a measurement by hand (figures printed, as ``test_reliability_load.py`` does):
``GYM_MCP_BRIDGE_INFLIGHT_ROLLOUTS`` (default 1000) and ``GYM_MCP_BRIDGE_INFLIGHT_OPEN_FILES`` (the
bridges' soft limit at start, default 256).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import resource
import socket
import time
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bridge import limits
from bridge.http.accept import Acceptor
from bridge.settings import Settings
from bridge.upstream.client import ADAPTIVE_FLOOR
from bridge.upstream.transport import MAX_IDLE
from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row, free_port
from tests.fixtures.helpers import (
    MCP_HEADERS,
    MCP_INITIALIZE,
    bridge_log_problems,
    gym_response,
    metric,
    post_once,
    rpc_call,
)

pytestmark = pytest.mark.anyio

ROLLOUTS = int(os.environ.get("GYM_MCP_BRIDGE_INFLIGHT_ROLLOUTS", "1000"))
OPEN_FILES = int(os.environ.get("GYM_MCP_BRIDGE_INFLIGHT_OPEN_FILES", "256"))


def plan(i: int) -> tuple[dict[str, Any], int, int]:
    """Rollout ``i``: its row and its two increments; one row in four expects one count too many, so
    Gym scores it 0."""
    first, second = i % 3 + 1, i % 5 + 1
    initial = 1000 + i
    expected = initial + first + second + (1 if i % 4 == 0 else 0)
    return counter_row(initial, expected), first, second


def scored(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verify answer without the bridge's own report: what Gym's /verify said."""
    return {key: value for key, value in verdict.items() if key != "_bridge"}


async def gym_alone(url: str, count: int) -> list[dict[str, Any]]:
    """Every rollout's verify answer from a bare Gym server: the same row and calls, Gym's cookie."""
    answers: list[dict[str, Any]] = [{} for _ in range(count)]
    limiter = asyncio.Semaphore(32)

    async def one(http: httpx.AsyncClient, i: int) -> None:
        row, first, second = plan(i)
        async with limiter:
            seeded = await http.post(f"{url}/seed_session", json=row)
            cookie = "; ".join(c.split(";", 1)[0] for c in seeded.headers.get_list("set-cookie"))
            for count_by in (first, second):
                called = await http.post(
                    f"{url}/increment_counter", json={"count": count_by}, headers={"cookie": cookie}
                )
                assert called.status_code == 200, called.text
            verdict = await http.post(
                f"{url}/verify", json={**row, "response": gym_response()}, headers={"cookie": cookie}
            )
        assert verdict.status_code == 200, verdict.text
        answers[i] = verdict.json()

    jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))  # keeps none: each rollout sends its own
    async with httpx.AsyncClient(timeout=60, cookies=jar) as http:
        await asyncio.gather(*(one(http, i) for i in range(count)))
    return answers


async def rollout(i: int, replicas: list[str]) -> dict[str, Any]:
    """Rollout ``i`` through the bridges, every request on a new connection; raises on any failure.
    Seeded on replica ``i % 2``; its MCP calls go to the other replica for half the rollouts, its
    verify for another half (forwarded to the owner)."""
    row, first, second = plan(i)
    owner, other = replicas[i % 2], replicas[(i + 1) % 2]
    status, _, body = await post_once(owner, "/seed_session", row)
    if status != 200:
        raise AssertionError(f"seed: HTTP {status}: {body[:200]!r}")
    token = orjson.loads(body)["mcp"]["headers"][HEADER]
    mcp = other if i % 4 < 2 else owner
    status, headers, body = await post_once(mcp, "/mcp", MCP_INITIALIZE, {**MCP_HEADERS, HEADER: token})
    if status != 200 or "result" not in orjson.loads(body):
        raise AssertionError(f"initialize: HTTP {status}: {body[:200]!r}")
    session = {"mcp-session-id": headers["mcp-session-id"]} if "mcp-session-id" in headers else {}
    call_headers = {**MCP_HEADERS, HEADER: token, "mcp-protocol-version": "2025-06-18", **session}
    for request_id, count_by in ((1, first), (2, second)):
        call = rpc_call("increment_counter", {"count": count_by}, request_id)
        status, _, body = await post_once(mcp, "/mcp", call, call_headers)
        result = orjson.loads(body).get("result") if status == 200 else None
        if result is None or result.get("isError"):
            raise AssertionError(f"tools/call: HTTP {status}: {body[:200]!r}")
    verifier = other if i % 3 == 0 else owner
    status, _, body = await post_once(
        verifier, "/verify", {**row, "response": gym_response()}, {HEADER: token}
    )
    if status != 200:
        raise AssertionError(f"verify: HTTP {status}: {body[:200]!r}")
    return dict(orjson.loads(body))


async def run_all(replicas: list[str], count: int) -> tuple[list[Any], list[float], float]:
    """Every rollout at once: (verify answer or the exception, per rollout; seconds per rollout; wall)."""
    seconds: list[float] = []

    async def timed(i: int) -> dict[str, Any]:
        began = time.perf_counter()
        answer = await rollout(i, replicas)
        seconds.append(time.perf_counter() - began)
        return answer

    began = time.perf_counter()
    results = await asyncio.gather(*(timed(i) for i in range(count)), return_exceptions=True)
    return list(results), seconds, time.perf_counter() - began


def client_descriptors(needed: int) -> None:
    """This (client) process needs a descriptor per connection in flight: raise its own soft limit."""
    raised = limits.raise_open_files()
    if raised.soft < needed:
        pytest.fail(f"the test client needs {needed} open files, its hard limit allows {raised.hard}")


def nofile(pid: int) -> tuple[int, int]:
    line = next(
        x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if x.startswith("Max open files")
    )
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n[figures] {line}", flush=True)


@pytest.mark.soak
async def test_rollouts_in_flight_on_two_replicas_under_a_small_soft_limit_are_exact(
    spawn_bridge: Any, gym_upstream: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    client_descriptors(2 * ROLLOUTS + 256)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    port_a, port_b = free_port(), free_port()
    a: BridgeProcess = spawn_bridge(
        ["--advertise-url", f"http://127.0.0.1:{port_a}"], port=port_a, open_files=OPEN_FILES
    )
    b: BridgeProcess = spawn_bridge(
        ["--advertise-url", f"http://localhost:{port_b}"], port=port_b, open_files=OPEN_FILES
    )
    expected = await gym_alone(gym_upstream().url, ROLLOUTS)

    upstream_bound, peer_bound = Settings.model_validate({}).connection_bounds(hard)  # shares of the limit
    for bridge in (a, b):  # raised, and inherited by the Gym server it spawned
        assert bridge.proc is not None
        assert f"open files: soft limit raised from {OPEN_FILES} to {hard}" in bridge.log(), bridge.log()
        assert f"{upstream_bound} to the upstream, {peer_bound} to each other replica" in bridge.log()
        child = bridge.health()["upstream"]["pid"]
        assert nofile(bridge.proc.pid) == (hard, hard) and nofile(child) == (hard, hard)

    results, seconds, wall = await run_all([a.url, b.url], ROLLOUTS)

    failures = [
        (i, f"{type(r).__name__}: {r}") for i, r in enumerate(results) if isinstance(r, BaseException)
    ]
    assert not failures, f"{len(failures)} of {ROLLOUTS} rollouts failed, first: {failures[:3]}"
    wrong = [(i, scored(r), expected[i]) for i, r in enumerate(results) if scored(r) != expected[i]]
    assert not wrong, f"{len(wrong)} verify answers differ from Gym's alone, first: {wrong[:2]}"
    assert {e["reward"] for e in expected} == {0.0, 1.0}  # both outcomes were scored
    for bridge in (a, b):
        assert metric(bridge, "gym_mcp_bridge_forwarded_total", outcome="relayed") > 0
        assert metric(bridge, "gym_mcp_bridge_accept_failures") == 0
        # the burst is over: each pool keeps at most an eighth of its bound idle (MAX_IDLE at most)
        connections = bridge.health()["connections"]
        assert connections["upstream"]["limit"] == min(ADAPTIVE_FLOOR, upstream_bound)  # the load is gone
        assert connections["upstream"]["idle"] <= min(MAX_IDLE, upstream_bound // 8)
        assert connections["peers"]["idle"] <= min(MAX_IDLE, peer_bound // 8)
        assert connections["upstream"]["queued"] == connections["peers"]["queued"] == 0
        # this one, and the other replica's idle connections to it (at most its peers' max_idle)
        assert connections["clients"]["open"] <= min(MAX_IDLE, peer_bound // 8) + 64, connections
        assert "Too many open files" not in bridge.log() and not bridge_log_problems(bridge.log())
    report(
        capsys,
        f"in flight: {ROLLOUTS} rollouts on 2 replicas (soft limit {OPEN_FILES} at start, raised to {hard}), "
        f"a connection per request: {ROLLOUTS / wall:.0f} rollouts/s, per rollout p50 "
        f"{percentile(seconds, 0.5):.2f} s p99 {percentile(seconds, 0.99):.2f} s; exact {ROLLOUTS - len(wrong)}",
    )


async def test_a_bridge_that_cannot_raise_its_limit_queues_connections_and_says_so(
    spawn_bridge: Any, gym_upstream: Any
) -> None:
    count = 200
    client_descriptors(2 * count + 256)
    bridge: BridgeProcess = spawn_bridge(["--upstream-connections", "8"], open_files=160, hard_open_files=160)
    assert "open files: soft limit 160 (hard limit 160), not raised" in bridge.log()
    budget = limits.connection_budget(160, *Settings(upstream_connections=8).connection_bounds(160))
    assert f"at most {budget} client connections open at once" in bridge.log()
    expected = await gym_alone(gym_upstream().url, count)

    results, _, _ = await run_all([bridge.url, bridge.url], count)

    failures = [
        (i, f"{type(r).__name__}: {r}") for i, r in enumerate(results) if isinstance(r, BaseException)
    ]
    assert not failures, f"{len(failures)} of {count} rollouts failed, first: {failures[:3]}"
    assert [scored(r) for r in results] == expected
    log = bridge.log()
    paused = re.search(r"(\d+) client connections open, the limit this process's open files allow", log)
    assert paused is not None and int(paused.group(1)) == budget, log[-3000:]
    assert "accepting connections again" in log
    assert "Too many open files" not in log and not bridge_log_problems(log)


class ScarceListener:
    """A listening socket whose first ``failures`` accepts fail with EMFILE, as at the file limit."""

    def __init__(self, sock: socket.socket, failures: int) -> None:
        self.sock = sock
        self.failures = failures

    def fileno(self) -> int:
        return self.sock.fileno()

    def accept(self) -> tuple[socket.socket, Any]:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return self.sock.accept()


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(b"served " + data)
        self.transport.close()


async def test_accept_at_emfile_is_logged_and_the_connection_waits_to_be_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    scarce = ScarceListener(listener, failures=3)
    acceptor = Acceptor(asyncio.get_running_loop(), Echo, scarce, limit=100)  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.INFO, "gym_mcp_bridge.accept"):
            acceptor.start()
            reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            writer.write(b"hello")
            answer = await asyncio.wait_for(reader.read(), 30)
            writer.close()
        assert answer == b"served hello", "the connection waited in the listen queue, never reset"
        assert scarce.failures == 0 and acceptor.failed_total == 3
        lines = [r.message for r in caplog.records if "[Errno 24] Too many open files" in r.message]
        assert len(lines) == 1, caplog.text  # one line a second at most, with the count
        assert lines[0].startswith("accept out of a resource: [Errno 24] Too many open files (1 failures")
        assert "connections wait in the listen queue" in lines[0]
    finally:
        acceptor.close()
        listener.close()
