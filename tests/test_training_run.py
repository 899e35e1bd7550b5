"""A training run through the bridge, at small scale: rollouts that are verified and never closed
(as Gym's collector drives them), under a session cap and a state budget set low, and retries that
must be applied once.

The upstream is Gym's own ``example_session_state_mgmt`` (nemo-gym 0.4.0), which counts every
applied ``increment_counter``: a retry applied twice, or a rollout scored against state it did not
build, shows in its reward. Every expected reward is Gym's own answer for the same row and calls,
asked of the same upstream directly (its REST surface with its own cookie), never the bridge's.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Iterator
from http.cookiejar import CookieJar
from typing import Any

import httpx
import orjson
import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, UpstreamProcess, counter_row, mcp_client
from tests.fixtures.helpers import MCP_HEADERS, MCP_INITIALIZE, claims_of, gym_response, metric, rpc_call

pytestmark = pytest.mark.anyio

BUDGET = 1024 * 1024  # holds a few hundred finished counter rollouts: evictions start early
ROLLOUTS = 2000


@pytest.fixture(scope="module")
def upstream(log_dir: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    """One bare Gym upstream: the bridge's, and Gym alone for the expected rewards."""
    import subprocess
    import time

    from tests.fixtures.bridges import GYM_PYTHON, boot_upstream, wait_for_upstream

    folder = tmp_path_factory.mktemp("upstream")
    port_file, log = folder / "port", folder / "upstream.log"
    proc = boot_upstream(GYM_PYTHON, "example_session_state_mgmt", port_file, log)
    try:
        url = wait_for_upstream(proc, port_file, log, time.monotonic() + 120)
        yield UpstreamProcess(proc, url, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def bridge(upstream: UpstreamProcess, log_dir: Any) -> Iterator[BridgeProcess]:
    """Defaults but for a low cap and budget, in front of the module's upstream."""
    args = ["--upstream-url", upstream.url, "--max-sessions", "16", "--state-budget-bytes", str(BUDGET)]
    process = BridgeProcess(args=args).start(log_dir)
    yield process
    process.stop()


class NoJar(CookieJar):
    """A cookie jar that keeps nothing: concurrent rollouts on one client must not share cookies."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: Any) -> None:
        return None


def no_cookies() -> httpx.AsyncClient:
    """An async client that keeps no cookies and opens a new connection per request, as a harness
    that reconnects per call."""
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.AsyncClient(timeout=60, limits=limits, cookies=NoJar())


async def gym_alone(
    client: httpx.AsyncClient, url: str, initial: int, calls: list[int], expected: int
) -> Any:
    """Gym's own reward for a counter rollout: seed, ``increment_counter`` per call, verify, each
    with the cookie of the answer before (as Gym's clients do)."""
    row = counter_row(initial, expected)
    seeded = await client.post(f"{url}/seed_session", json=row)
    assert seeded.status_code == 200, seeded.text
    cookie = {"cookie": seeded.headers["set-cookie"].split(";", 1)[0]}
    for count in calls:
        answer = await client.post(f"{url}/increment_counter", json={"count": count}, headers=cookie)
        assert answer.status_code == 200, answer.text
        cookie = {"cookie": answer.headers["set-cookie"].split(";", 1)[0]}
    verified = await client.post(f"{url}/verify", json={**row, "response": gym_response()}, headers=cookie)
    assert verified.status_code == 200, verified.text
    return verified.json()["reward"]


async def bridged(client: httpx.AsyncClient, url: str, initial: int, calls: list[int], expected: int) -> Any:
    """The same rollout through the bridge as a reconnecting MCP harness drives it, never closed:
    seed, initialize, one ``tools/call`` per call (a new connection each), verify."""
    row = counter_row(initial, expected)
    seeded = await client.post(f"{url}/seed_session", json=row)
    assert seeded.status_code == 200, seeded.text
    token = seeded.json()["mcp"]["headers"][HEADER]
    headers = {**MCP_HEADERS, HEADER: token}
    init = await client.post(f"{url}/mcp", json=MCP_INITIALIZE, headers=headers)
    headers["mcp-session-id"] = init.headers["mcp-session-id"]
    for index, count in enumerate(calls, 1):
        answer = await client.post(
            f"{url}/mcp", json=rpc_call("increment_counter", {"count": count}, index), headers=headers
        )
        assert answer.status_code == 200 and "isError" not in answer.text.replace('"isError":false', ""), (
            answer.text
        )
    verified = await client.post(
        f"{url}/verify", json={**row, "response": gym_response()}, headers={HEADER: token}
    )
    assert verified.status_code == 200, verified.text
    return verified.json()["reward"]


@pytest.mark.soak
async def test_rollouts_never_closed_are_never_refused_and_score_as_gym(
    bridge: BridgeProcess, upstream: UpstreamProcess
) -> None:
    """2,000 rollouts, 8 at a time, none closed, against a cap of 16 and a 1 MiB budget: every seed
    is accepted, every reward is Gym's own (right and wrong expected counts alike), and the bytes
    held stay under the budget while finished sessions are released."""
    rng = random.Random(7)
    plans = [
        (rng.randrange(100), [rng.randrange(1, 5) for _ in range(2)], rng.random() < 0.5)
        for _ in range(ROLLOUTS)
    ]
    async with no_cookies() as client:
        queue = list(enumerate(plans))
        results: dict[int, tuple[Any, Any]] = {}

        async def worker() -> None:
            while queue:
                index, (initial, calls, right) = queue.pop()
                expected = initial + sum(calls) + (0 if right else 1)
                results[index] = (
                    await bridged(client, bridge.url, initial, calls, expected),
                    await gym_alone(client, upstream.url, initial, calls, expected),
                )

        await asyncio.gather(*(worker() for _ in range(8)))
    assert len(results) == ROLLOUTS
    assert [(i, plans[i], *r) for i, r in results.items() if r[0] != r[1]] == []
    assert {theirs for _, theirs in results.values()} == {0.0, 1.0}  # both outcomes present
    assert metric(bridge, "gym_mcp_bridge_rejections_total", reason="cap") == 0
    assert metric(bridge, "gym_mcp_bridge_rejections_total", reason="budget") == 0
    assert metric(bridge, "gym_mcp_bridge_sessions_active") == 0
    assert metric(bridge, "gym_mcp_bridge_state_bytes") <= BUDGET
    assert metric(bridge, "gym_mcp_bridge_sessions_ended_total", reason="evicted") > 0
    assert metric(bridge, "gym_mcp_bridge_upstream_closes_total") == 0  # Gym 0.4 has no /close_session


async def test_an_ended_session_is_named_never_recreated(bridge: BridgeProcess) -> None:
    """A verified session serves a repeated verify (Gym's same answer) but no more tool calls; once
    released under the budget, every use names it: 409 on REST, an MCP error."""
    row = counter_row(5, 6)
    token = bridge.seed(row)["mcp"]["headers"][HEADER]
    assert (
        httpx.post(f"{bridge.url}/increment_counter", json={"count": 1}, headers={HEADER: token}).status_code
        == 200
    )
    body = {**row, "response": gym_response()}
    first = httpx.post(f"{bridge.url}/verify", json=body, headers={HEADER: token})
    again = httpx.post(f"{bridge.url}/verify", json=body, headers={HEADER: token})
    assert first.json()["reward"] == again.json()["reward"] == 1.0
    late = httpx.post(f"{bridge.url}/increment_counter", json={"count": 1}, headers={HEADER: token})
    assert late.status_code == 409 and "finished at" in late.json()["detail"]
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        result = await client.call_tool("increment_counter", {"count": 1})
    assert result.is_error and "its tools no longer run" in result.content[0].text  # type: ignore[union-attr]

    async def finished_rollouts(count: int) -> None:
        async with no_cookies() as client:
            for _ in range(count):
                other = counter_row(0)
                seeded = await client.post(f"{bridge.url}/seed_session", json=other)
                headers = {HEADER: seeded.json()["mcp"]["headers"][HEADER]}
                body = {**other, "response": gym_response()}
                await client.post(f"{bridge.url}/verify", json=body, headers=headers)

    # enough finished rollouts to push this one out of the budget (each holds more than 1 KB)
    await asyncio.gather(*(finished_rollouts(BUDGET // 1024 // 8) for _ in range(8)))
    gone = httpx.post(f"{bridge.url}/verify", json=body, headers={HEADER: token})
    assert gone.status_code == 409, gone.text
    sid = claims_of(token)["sid"]
    assert gone.json()["detail"].startswith(f"session {sid} ended at ")
    assert f"finished, then released to make room under state_budget_bytes={BUDGET}" in gone.json()["detail"]


# -- retries ---------------------------------------------------------------------------------------


def raw_post(bridge: BridgeProcess, body: bytes, headers: dict[str, str], read: bool = True) -> bytes | None:
    """One POST /mcp on its own connection; with ``read=False`` the connection is dropped as soon as
    the request is written (the answer is lost, as when a harness times out)."""
    head = "".join(f"{k}: {v}\r\n" for k, v in {**MCP_HEADERS, **headers}.items())
    with socket.create_connection((bridge.host, bridge.port), timeout=30) as sock:
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nhost: {bridge.host}:{bridge.port}\r\n{head}content-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n".encode()
            + body
        )
        if not read:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return None
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).split(b"\r\n\r\n", 1)[1]


def counter_of(bridge: BridgeProcess, token: str) -> int:
    answer = httpx.post(f"{bridge.url}/get_counter_value", json={}, headers={HEADER: token})
    return int(answer.json()["count"])


def mcp_session(bridge: BridgeProcess, token: str) -> str:
    init = httpx.post(f"{bridge.url}/mcp", json=MCP_INITIALIZE, headers={**MCP_HEADERS, HEADER: token})
    assert init.status_code == 200
    return init.headers["mcp-session-id"]


def test_a_repeated_jsonrpc_id_in_one_mcp_session_is_applied_once(bridge: BridgeProcess) -> None:
    token = bridge.seed(counter_row(10))["mcp"]["headers"][HEADER]
    label = mcp_session(bridge, token)
    headers = {HEADER: token, "mcp-session-id": label}
    call = orjson.dumps(rpc_call("increment_counter", {"count": 3}, 7))
    raw_post(bridge, call, headers, read=False)  # the answer is lost: the harness retries
    first = raw_post(bridge, call, headers)
    second = raw_post(bridge, call, headers)
    assert first == second and b'"isError":false' in (first or b"")
    assert counter_of(bridge, token) == 13  # once, as Gym counts it
    other_label = mcp_session(bridge, token)  # a new MCP session of the rollout starts its ids afresh
    raw_post(bridge, call, {HEADER: token, "mcp-session-id": other_label})
    assert counter_of(bridge, token) == 16
    changed = raw_post(bridge, orjson.dumps(rpc_call("increment_counter", {"count": 4}, 7)), headers)
    answer = orjson.loads(changed or b"{}")
    assert answer["result"]["isError"] is True
    assert (
        f"JSON-RPC id 7 of MCP session {label} was already used for another call"
        in answer["result"]["content"][0]["text"]
    )
    assert counter_of(bridge, token) == 16


async def test_concurrent_repeats_wait_for_the_first_answer(bridge: BridgeProcess) -> None:
    token = bridge.seed(counter_row(0))["mcp"]["headers"][HEADER]
    headers = {**MCP_HEADERS, HEADER: token, "idempotency-key": "call-1"}
    body = rpc_call("increment_counter", {"count": 2}, 1)
    async with httpx.AsyncClient(timeout=30) as client:
        answers = await asyncio.gather(
            *(client.post(f"{bridge.url}/mcp", json=body, headers=headers) for _ in range(8))
        )
    assert len({a.content for a in answers}) == 1
    assert counter_of(bridge, token) == 2
    assert metric(bridge, "gym_mcp_bridge_retries_total", matched_by="idempotency_key") >= 7


@pytest.mark.parametrize("where", ["header", "param"])
def test_an_idempotency_key_applies_a_stateless_mcp_call_once(bridge: BridgeProcess, where: str) -> None:
    token = bridge.seed(counter_row(1))["mcp"]["headers"][HEADER]
    body = rpc_call("increment_counter", {"count": 5}, 1)
    headers = {HEADER: token}
    if where == "param":
        body["params"]["idempotencyKey"] = "k-1"
    else:
        headers["idempotency-key"] = "k-1"
    answers = [raw_post(bridge, orjson.dumps(body), headers) for _ in range(3)]
    assert answers[0] == answers[1] == answers[2]
    assert counter_of(bridge, token) == 6
    assert raw_post(bridge, orjson.dumps(rpc_call("increment_counter", {"count": 5}, 1)), {HEADER: token})
    assert counter_of(bridge, token) == 11  # without a key or an MCP session, every request is a call


def test_rest_idempotency_key_applies_once_and_refuses_other_arguments(bridge: BridgeProcess) -> None:
    token = bridge.seed(counter_row(0))["mcp"]["headers"][HEADER]
    headers = {HEADER: token, "idempotency-key": "retry-me"}
    url = f"{bridge.url}/increment_counter"
    first, second = (httpx.post(url, json={"count": 4}, headers=headers) for _ in range(2))
    assert first.status_code == second.status_code == 200 and first.content == second.content
    assert counter_of(bridge, token) == 4
    other = httpx.post(url, json={"count": 9}, headers=headers)
    assert other.status_code == 422
    assert "idempotency key 'retry-me' was already used for another call" in other.json()["detail"]
    assert counter_of(bridge, token) == 4
    bad = httpx.post(url, json={"count": 1}, headers={HEADER: token, "idempotency-key": "x" * 300})
    assert bad.status_code == 400 and "Idempotency-Key refused" in bad.json()["detail"]


async def test_the_sdk_client_gets_an_mcp_session_id_and_still_calls(bridge: BridgeProcess) -> None:
    """The official MCP client keeps the Mcp-Session-Id the bridge gives at initialize and sends it
    back; its calls work as before (each one a new id: applied every time)."""
    token = bridge.seed(counter_row(0))["mcp"]["headers"][HEADER]
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        for _ in range(3):
            result = await client.call_tool("increment_counter", {"count": 1})
            assert not result.is_error
    assert counter_of(bridge, token) == 3
    refused = httpx.get(f"{bridge.url}/mcp", headers={**MCP_HEADERS, "accept": "text/event-stream"})
    # the spec: a GET is answered with an event stream or 405 (the stream would be held per harness)
    assert refused.status_code == 405 and refused.headers["allow"] == "POST, DELETE"
    assert refused.json()["error"]["message"].startswith("method GET not allowed on /mcp")


async def test_sessions_the_bridge_releases_are_closed_on_a_07_upstream(
    gym07_python: Any, log_dir: Any
) -> None:
    """Gym >= 0.7 frees per-rollout state in ``/close_session``, which Gym's collector never calls:
    when the bridge releases a finished session under its budget, it posts that close itself, and
    Gym 0.7 accepts the body (its own validation would answer 422)."""
    args = ["--gym-python", str(gym07_python), "--state-budget-bytes", str(BUDGET)]
    bridge = BridgeProcess(args=args).start(log_dir, timeout=300)
    try:
        async with no_cookies() as client:

            async def finished_rollouts(count: int) -> None:
                for _ in range(count):
                    row = counter_row(0)
                    seeded = await client.post(f"{bridge.url}/seed_session", json=row)
                    headers = {HEADER: seeded.json()["mcp"]["headers"][HEADER]}
                    verified = await client.post(
                        f"{bridge.url}/verify", json={**row, "response": gym_response()}, headers=headers
                    )
                    assert verified.json()["reward"] == 1.0

            await asyncio.gather(*(finished_rollouts(BUDGET // 1024 // 8) for _ in range(8)))
        evicted = metric(bridge, "gym_mcp_bridge_sessions_ended_total", reason="evicted")
        assert evicted > 0
        for _ in range(100):  # released in the background, a few at a time
            if metric(bridge, "gym_mcp_bridge_upstream_closes_total") >= evicted:
                break
            await asyncio.sleep(0.1)
        assert metric(bridge, "gym_mcp_bridge_upstream_closes_total", outcome="closed") == evicted
    finally:
        bridge.stop()


def test_a_retry_through_another_replica_is_matched_at_the_owner(
    spawn_bridge: Any, upstream: UpstreamProcess
) -> None:
    """The Mcp-Session-Id is a label, not one replica's state: initialize on one replica, the call on
    the other, the retry on the first again; the owner matches it and Gym counts it once."""
    owner, other = (spawn_bridge(["--upstream-url", upstream.url]) for _ in range(2))
    token = owner.seed(counter_row(30))["mcp"]["headers"][HEADER]
    label = mcp_session(other, token)
    call = orjson.dumps(rpc_call("increment_counter", {"count": 2}, 1))
    through_other = raw_post(other, call, {HEADER: token, "mcp-session-id": label})
    direct = raw_post(owner, call, {HEADER: token, "mcp-session-id": label})
    assert through_other == direct and b'"isError":false' in (direct or b"")
    assert counter_of(owner, token) == 32
    assert metric(owner, "gym_mcp_bridge_retries_total", matched_by="jsonrpc_id") == 1
