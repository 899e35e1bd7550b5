"""Any replica serves any session: replicas behind a plain round-robin balancer, no affinity.

Each replica is a pod as the StatefulSet runs it: its own real Gym resources server and a bridge in
external mode in front of it, one shared secret, its own advertise URL (127.0.0.1 ports, so the
default peers -- any loopback name, any port -- cover them). An in-test balancer spreads every
request over the replicas, one after the other, as a Kubernetes Service without affinity does.

Gym-style cookie clients (seed -> ``POST /<tool>`` with the cookies -> ``/verify`` ->
``/close_session``) and the official MCP SDK client (token header on ``/mcp``, then ``/verify``
and ``/close_session`` with the token) run whole rollouts of ``example_session_state_mgmt`` and
``workplace_assistant`` through it: rewards equal the native ones (straight to a Gym server), every
session's state is exact, and the upstreams count their requests (the fault fixture's counter, on
the counter env and wrapped around the workplace server), so each upstream is seen to get exactly
the requests of the sessions its replica owns, and nothing of any other.

Plus the refusals: an owner claim signed with another key (nobody contacted), an issuer outside the
peers (refused naming it, nobody contacted), the loop marker (a forwarded request is never forwarded
again), an owner killed mid-rollout (502 naming it), and what the owner answers for a session it
does not know.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.commands.replay import ground_truth_response
from bridge.http.forwarding import MARKER
from bridge.scoring.trajectory import function_calls
from tests.fixtures.balancer import Balancer
from tests.fixtures.bridges import (
    GYM_PYTHON,
    HEADER,
    BridgeProcess,
    boot_upstream,
    counter_row,
    free_port,
    gym_data,
    mcp_client,
    wait_for_upstream,
)
from tests.fixtures.helpers import (
    FAULT_SPEC,
    MCP_HEADERS,
    OTHER_KEY,
    claims_of,
    fault_env,
    forge,
    gym_response,
    metric,
    rpc_call,
    seed,
    text_of,
    upstream_counts,
)

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")]

BRIDGE_COOKIE = "gym_mcp_bridge_session"
COUNTED_WORKPLACE = '''
"""The workplace_assistant resources server with the fault fixture's request counter (tests only)."""
from resources_servers.workplace_assistant.app import WorkbenchResourcesServer
from tests.fixtures.fault_injection_server import RequestCounter


class CountedWorkplaceServer(WorkbenchResourcesServer):
    def setup_exception_middleware(self, app):
        super().setup_exception_middleware(app)
        app.add_middleware(RequestCounter)
'''


# -- replicas ------------------------------------------------------------------------------------------


@dataclass
class Replica:
    upstream: subprocess.Popen[bytes]
    upstream_url: str
    bridge: BridgeProcess

    @property
    def url(self) -> str:
        return self.bridge.url

    def posts(self) -> Counter[str]:
        return Counter({k: n for k, n in upstream_counts(self.upstream_url).items() if k.startswith("POST ")})


def start_upstreams(spec: str, count: int, workdir: Path, env: dict[str, str]) -> list[tuple[Any, str]]:
    """``count`` Gym servers booted at once (each a pod's resources server); (process, URL) each."""
    started = []
    for i in range(count):
        port_file = workdir / f"upstream-{i}.json"
        log = workdir / f"upstream-{i}.log"
        proc = boot_upstream(GYM_PYTHON, spec, port_file, log, {**os.environ, **env})
        started.append((proc, port_file, log))
    out = []
    deadline = time.monotonic() + 240
    for proc, port_file, log in started:
        out.append((proc, wait_for_upstream(proc, port_file, log, deadline)))
    return out


def start_bridges(
    upstreams: list[tuple[Any, str]], server_name: str, log_dir: Path, *extra: str
) -> list[Replica]:
    bridges = []
    for _, url in upstreams:
        port = free_port()
        args = [
            "--upstream-url",
            url,
            "--server-name",
            server_name,
            "--advertise-url",
            f"http://127.0.0.1:{port}",
        ]
        bridges.append(BridgeProcess(args=[*args, *extra], port=port).start(log_dir, wait_ready=False))
    for bridge in bridges:
        bridge.wait_ready(120)
    return [Replica(proc, url, bridge) for (proc, url), bridge in zip(upstreams, bridges, strict=True)]


def stop(replicas: list[Replica]) -> None:
    for replica in replicas:
        if replica.bridge.proc is not None:
            replica.bridge.stop()
        if replica.upstream.poll() is None:
            os.killpg(replica.upstream.pid, signal.SIGKILL)
            replica.upstream.wait()


@pytest.fixture(scope="module")
def counter_replicas(log_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    """Three pods of Gym's stateful counter (the fault fixture: the counter plus a request counter)."""
    workdir = tmp_path_factory.mktemp("counter-pods")
    upstreams = start_upstreams(FAULT_SPEC, 3, workdir, fault_env())
    replicas = start_bridges(upstreams, "example_session_state_mgmt", log_dir)
    yield replicas
    stop(replicas)


@pytest.fixture(scope="module")
def workplace_replicas(log_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    """Three pods of Gym's workplace_assistant (wrapped in the fixture's request counter)."""
    workdir = tmp_path_factory.mktemp("workplace-pods")
    (workdir / "counted_workplace.py").write_text(COUNTED_WORKPLACE)
    env = fault_env()
    env["PYTHONPATH"] = f"{workdir}{os.pathsep}{env['PYTHONPATH']}"
    upstreams = start_upstreams("counted_workplace:CountedWorkplaceServer", 3, workdir, env)
    replicas = start_bridges(upstreams, "workplace_assistant", log_dir)
    yield replicas
    stop(replicas)


# -- rollouts --------------------------------------------------------------------------------------


@dataclass
class Rollout:
    owner: str  # the advertise URL of the replica that seeded the session
    reward: float | None
    state: Any  # what the session's own state read back (counter) or the tool outputs (workplace)
    calls: int


def owner_of(seed: dict[str, Any]) -> str:
    return str(seed["mcp"]["url"]).removesuffix("/mcp")


def counter_native(upstream: str, initial: int, increments: list[int], expected: int) -> Rollout:
    row = counter_row(initial, expected)
    with httpx.Client(base_url=upstream, timeout=60) as http:
        http.post("/seed_session", json=row).raise_for_status()
        for count in increments:
            http.post("/increment_counter", json={"count": count}).raise_for_status()
        state = http.post("/get_counter_value", json={}).json()
        verdict = http.post("/verify", json={**row, "response": gym_response()}).json()
    return Rollout(upstream, verdict["reward"], state, len(increments))


def counter_cookie_client(base: str, initial: int, increments: list[int], expected: int) -> Rollout:
    """Gym's own HTTP client: every request to the one ``resources_url``, carrying its cookies."""
    row = counter_row(initial, expected)
    with httpx.Client(base_url=base, timeout=60) as http:
        seeded = http.post("/seed_session", json=row)
        assert seeded.status_code == 200, seeded.text
        assert BRIDGE_COOKIE in http.cookies and len(http.cookies) >= 2, "upstream and bridge cookie"
        for count in increments:
            called = http.post("/increment_counter", json={"count": count})
            assert called.status_code == 200 and called.json() == {"success": True}, called.text
        state = http.post("/get_counter_value", json={}).json()
        verdict = http.post("/verify", json={**row, "response": gym_response()})
        assert verdict.status_code == 200, verdict.text
        closed = http.post("/close_session", json={})
        assert closed.status_code == 200 and closed.json()["closed"] is True, closed.text
        assert BRIDGE_COOKIE not in http.cookies, "the owner's cookie deletion reached the client"
    return Rollout(owner_of(seeded.json()), verdict.json()["reward"], state, len(increments))


async def counter_mcp_client(base: str, initial: int, increments: list[int], expected: int) -> Rollout:
    """An MCP harness that ignores the per-pod URL and talks to the Service, token in the header."""
    seeded = httpx.post(f"{base}/seed_session", json=counter_row(initial, expected), timeout=60)
    assert seeded.status_code == 200, seeded.text
    token = seeded.json()["mcp"]["headers"][HEADER]
    async with mcp_client(f"{base}/mcp", token) as client:
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["increment_counter", "get_counter_value"]
        for count in increments:
            result = await client.call_tool("increment_counter", {"count": count})
            assert not result.is_error and result.structured_content == {"success": True}, text_of(result)
        state = (await client.call_tool("get_counter_value", {})).structured_content
    headers = {HEADER: token}
    verdict = httpx.post(f"{base}/verify", json={"response": gym_response()}, headers=headers, timeout=60)
    assert verdict.status_code == 200, verdict.text
    closed = httpx.post(f"{base}/close_session", json={}, headers=headers, timeout=60)
    assert closed.status_code == 200, closed.text
    for _ in range(3):  # wherever the balancer sends it, the owner answers: the session is closed
        refused = httpx.post(f"{base}/get_counter_value", json={}, headers=headers, timeout=60)
        assert refused.status_code == 409 and "closed by /close_session" in refused.json()["detail"], (
            refused.text
        )
    return Rollout(owner_of(seeded.json()), verdict.json()["reward"], state, len(increments))


COUNTER_CASES = [  # (initial, increments, expected_count): rewards 1, 0, 1, 1, 0, 1
    (3, [1, 2], 6),
    (10, [5], 99),
    (0, [1, 1, 1, 1], 4),
    (7, [], 7),
    (1, [2, 3], 5),
    (20, [4, 4, 4], 32),
]


def expected_counter_posts(rollouts: list[Rollout], replica: Replica) -> Counter[str]:
    """The POSTs a replica's upstream must have seen: those of the sessions it owns, no other."""
    counts: Counter[str] = Counter()
    for rollout in rollouts:
        if rollout.owner == replica.url:
            counts.update(["POST /seed_session", "POST /get_counter_value", "POST /verify"])
            counts["POST /increment_counter"] += rollout.calls
    return +counts


@pytest.mark.parametrize("size", [2, 3])
async def test_counter_rollouts_through_a_round_robin_balancer(
    counter_replicas: list[Replica], size: int
) -> None:
    replicas = counter_replicas[:size]
    native = [counter_native(counter_replicas[2].upstream_url, *case) for case in COUNTER_CASES]
    before = [r.posts() for r in counter_replicas]
    relayed = [metric(r.bridge, "gym_mcp_bridge_forwarded_total", outcome="relayed") for r in replicas]
    with Balancer([r.url for r in replicas]) as balancer:
        cookie = [counter_cookie_client(balancer.at(i), *case) for i, case in enumerate(COUNTER_CASES)]
        mcp = [await counter_mcp_client(balancer.at(i + 1), *case) for i, case in enumerate(COUNTER_CASES)]
    assert all(balancer.hits[r.url] > 10 for r in replicas), balancer.hits
    for rollouts in (cookie, mcp):
        assert [r.reward for r in rollouts] == [n.reward for n in native] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
        assert [r.state for r in rollouts] == [n.state for n in native]
        assert [r.state for r in rollouts] == [{"count": i + sum(inc)} for i, inc, _ in COUNTER_CASES]
    assert {r.owner for r in cookie + mcp} == {r.url for r in replicas}, "every replica owned sessions"
    # each upstream saw exactly the requests of the sessions its replica owns: not one of another's
    for index, replica in enumerate(counter_replicas):
        seen = replica.posts() - before[index]
        assert seen == expected_counter_posts(cookie + mcp, replica), (replica.url, seen)
    for index, replica in enumerate(replicas):  # every replica relayed requests to the others
        assert metric(replica.bridge, "gym_mcp_bridge_forwarded_total", outcome="relayed") > relayed[index]


def workplace_native(upstream: str, row: dict[str, Any], response: dict[str, Any]) -> Rollout:
    outputs = []
    with httpx.Client(base_url=upstream, timeout=120) as http:
        http.post("/seed_session", json=row).raise_for_status()
        for item in function_calls(response):
            called = http.post(f"/{item['name']}", json=json.loads(item["arguments"]))
            assert called.status_code == 200, called.text
            outputs.append(called.json())
        verdict = http.post("/verify", json={**row, "response": response}).json()
    return Rollout(upstream, verdict["reward"], outputs, len(outputs))


def workplace_cookie_client(base: str, row: dict[str, Any], response: dict[str, Any]) -> Rollout:
    outputs = []
    with httpx.Client(base_url=base, timeout=120) as http:
        seeded = http.post("/seed_session", json=row)
        assert seeded.status_code == 200, seeded.text
        for item in function_calls(response):
            called = http.post(f"/{item['name']}", json=json.loads(item["arguments"]))
            assert called.status_code == 200, called.text
            outputs.append(called.json())
        verdict = http.post("/verify", json={**row, "response": response})
        assert verdict.status_code == 200, verdict.text
        assert http.post("/close_session", json={}).status_code == 200
    return Rollout(owner_of(seeded.json()), verdict.json()["reward"], outputs, len(outputs))


async def workplace_mcp_client(base: str, row: dict[str, Any], response: dict[str, Any]) -> Rollout:
    seeded = httpx.post(f"{base}/seed_session", json=row, timeout=120)
    assert seeded.status_code == 200, seeded.text
    token = seeded.json()["mcp"]["headers"][HEADER]
    outputs = []
    async with mcp_client(f"{base}/mcp", token) as client:
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == [t["name"] for t in row["responses_create_params"]["tools"]]
        for item in function_calls(response):
            result = await client.call_tool(item["name"], json.loads(item["arguments"]))
            assert not result.is_error, text_of(result)
            outputs.append(result.structured_content)
    headers = {HEADER: token}
    verdict = httpx.post(f"{base}/verify", json={"response": response}, headers=headers, timeout=120)
    assert verdict.status_code == 200, verdict.text
    assert httpx.post(f"{base}/close_session", json={}, headers=headers, timeout=60).status_code == 200
    return Rollout(owner_of(seeded.json()), verdict.json()["reward"], outputs, len(outputs))


@pytest.mark.parametrize("size", [2, 3])
async def test_workplace_rollouts_through_a_round_robin_balancer(
    workplace_replicas: list[Replica], size: int
) -> None:
    replicas = workplace_replicas[:size]
    rows = gym_data("workplace_assistant")
    cases = [(row, ground_truth_response(row, drop_last=i % 2 == 1)) for i, row in enumerate(rows)]
    native = [workplace_native(workplace_replicas[2].upstream_url, row, response) for row, response in cases]
    assert {n.reward for n in native} == {0.0, 1.0}, "the cases must tell a right rollout from a wrong one"
    before = [r.posts() for r in workplace_replicas]
    with Balancer([r.url for r in replicas]) as balancer:
        cookie = [workplace_cookie_client(balancer.at(i), *case) for i, case in enumerate(cases)]
        mcp = [await workplace_mcp_client(balancer.at(i + 1), *case) for i, case in enumerate(cases)]
    for rollouts in (cookie, mcp):
        assert [r.reward for r in rollouts] == [n.reward for n in native]
        assert [r.state for r in rollouts] == [n.state for n in native], "tool outputs differ from native"
    assert len({r.owner for r in cookie + mcp}) == size, "every replica owned sessions"
    for index, replica in enumerate(workplace_replicas):
        owned = [r for r in cookie + mcp if r.owner == replica.url]
        seen = replica.posts() - before[index]
        # the owner's upstream: a seed, the calls and a verify per session; tool routes are catch-alls
        assert seen["POST /seed_session"] == len(owned), (replica.url, seen)
        assert seen["POST /verify"] == len(owned), (replica.url, seen)
        tool_posts = sum(n for k, n in seen.items() if k not in ("POST /seed_session", "POST /verify"))
        assert tool_posts == sum(r.calls for r in owned), (replica.url, seen)


# -- refusals ---------------------------------------------------------------------------------------


def snapshot(replicas: list[Replica]) -> list[Any]:
    return [(r.posts(), metric(r.bridge, "gym_mcp_bridge_forwarded_total")) for r in replicas]


async def test_forged_owner_claim_is_refused_without_contacting_anyone(
    counter_replicas: list[Replica],
) -> None:
    a, b, _ = counter_replicas
    real = seed(b, counter_row(5))  # a live session on B
    forged = forge(claims_of(real), key=OTHER_KEY)  # the same claims, owner B, signed with another key
    before = snapshot(counter_replicas)
    async with mcp_client(f"{a.url}/mcp", forged) as client:
        result = await client.call_tool("increment_counter", {"count": 1})
    assert result.is_error and "signature is invalid" in text_of(result)
    for path in ("/increment_counter", "/verify", "/close_session"):
        refused = httpx.post(f"{a.url}{path}", json={"count": 1}, headers={HEADER: forged}, timeout=10)
        assert refused.status_code == 401 and "signature is invalid" in refused.json()["detail"], refused.text
    cookie = httpx.post(f"{a.url}/increment_counter", json={"count": 1}, cookies={BRIDGE_COOKIE: forged})
    assert cookie.status_code == 401 and "signature is invalid" in cookie.json()["detail"]
    # an unsigned claim (a marker header naming B, a body naming B) moves nothing either
    unsigned = httpx.post(
        f"{a.url}/increment_counter",
        json={"count": 1, "iss": b.url},
        headers={HEADER: forged, MARKER: b.url},
        timeout=10,
    )
    assert unsigned.status_code == 401
    assert snapshot(counter_replicas) == before, "a forged claim reached a replica or an upstream"
    assert httpx.post(f"{b.url}/get_counter_value", json={}, headers={HEADER: real}).json() == {"count": 5}


class ConnectionCounter:
    """A listening socket that counts the connections made to it (and answers none)."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"

    def accepted(self) -> int:
        count = 0
        with contextlib.suppress(TimeoutError, BlockingIOError):
            while True:
                conn, _ = self.sock.accept()
                conn.close()
                count += 1
        return count


async def test_issuer_outside_the_peers_is_refused_naming_it_without_contacting_it(
    counter_replicas: list[Replica],
) -> None:
    a = counter_replicas[0]
    outside = ConnectionCounter("127.0.0.2")  # reachable, but not a loopback name the peers list
    try:
        token = forge({**claims_of(seed(counter_replicas[1])), "iss": outside.url})  # the shared key
        reason = f"issued by another replica ({outside.url}), which is outside this deployment's peers"
        before = snapshot(counter_replicas)
        async with mcp_client(f"{a.url}/mcp", token) as client:
            result = await client.call_tool("increment_counter", {"count": 1})
            assert result.is_error and reason in text_of(result), text_of(result)
            with pytest.raises(Exception, match="outside this deployment's peers"):
                await client.list_tools()
        for path in ("/increment_counter", "/verify", "/close_session"):
            refused = httpx.post(f"{a.url}{path}", json={}, headers={HEADER: token}, timeout=10)
            assert refused.status_code == 401 and reason in refused.json()["detail"], refused.text
        assert outside.accepted() == 0, "the bridge contacted an issuer outside its peers"
        assert snapshot(counter_replicas) == before
    finally:
        outside.sock.close()


async def test_a_forwarded_request_is_never_forwarded_again(counter_replicas: list[Replica]) -> None:
    a, b, c = counter_replicas
    token = seed(b, counter_row(1))
    before = snapshot(counter_replicas)
    # a request that says it was forwarded already, at a replica that does not own the session
    for path, payload in (
        ("/mcp", rpc_call("increment_counter", {"count": 1}, 7)),
        ("/increment_counter", {}),
    ):
        looped = httpx.post(
            f"{a.url}{path}", json=payload, headers={**MCP_HEADERS, HEADER: token, MARKER: c.url}, timeout=10
        )
        assert looped.status_code == 508, looped.text
        text = looped.json()["error"]["message"] if path == "/mcp" else looped.json()["detail"]
        assert f"already forwarded by {c.url}: not forwarded again" in text and b.url in text
        if path == "/mcp":
            assert looped.json()["id"] == 7
    assert [s[0] for s in snapshot(counter_replicas)] == [s[0] for s in before], "B was contacted"
    # a real loop: a token (signed with the shared key) naming B by another of its names. C forwards
    # it there; B, which is not that name, would forward it again -- and refuses instead.
    alias = b.url.replace("127.0.0.1", "localhost")
    aliased = forge({**claims_of(token), "iss": alias})
    looped = httpx.post(f"{c.url}/get_counter_value", json={}, headers={HEADER: aliased}, timeout=10)
    assert looped.status_code == 508 and f"already forwarded by {c.url}" in looped.json()["detail"], (
        looped.text
    )
    assert httpx.post(f"{b.url}/get_counter_value", json={}, headers={HEADER: token}).json() == {"count": 1}


async def test_what_the_owner_says_about_a_session_it_does_not_know_comes_back_unchanged(
    counter_replicas: list[Replica],
) -> None:
    a, b, _ = counter_replicas
    token = seed(b)
    unknown = forge({**claims_of(token), "sid": "0" * 32})  # signed, owner B, a session B never had
    for path, payload in (
        ("/get_counter_value", {}),
        ("/verify", {}),
        ("/mcp", rpc_call("get_counter_value", {})),
    ):
        headers = {**MCP_HEADERS, HEADER: unknown}
        direct = httpx.post(f"{b.url}{path}", json=payload, headers=headers, timeout=10)
        via = httpx.post(f"{a.url}{path}", json=payload, headers=headers, timeout=10)
        assert (via.status_code, via.content) == (direct.status_code, direct.content), path
        assert via.status_code == (200 if path == "/mcp" else 401), via.text
        assert via.headers["content-type"] == direct.headers["content-type"]
    # the same for a session the owner lost (closed there): its own refusal, through any replica
    httpx.post(f"{b.url}/close_session", json={}, headers={HEADER: token}, timeout=10)
    via = httpx.post(f"{a.url}/get_counter_value", json={}, headers={HEADER: token}, timeout=10)
    assert via.status_code == 409 and "closed by /close_session" in via.json()["detail"], via.text


async def test_owner_killed_mid_rollout_is_a_502_naming_it(
    counter_replicas: list[Replica], log_dir: Path, tmp_path: Path
) -> None:
    a = counter_replicas[0]
    upstreams = start_upstreams(FAULT_SPEC, 1, tmp_path, fault_env())
    owner = start_bridges(upstreams, "example_session_state_mgmt", log_dir)
    try:
        seeded = httpx.post(f"{owner[0].url}/seed_session", json=counter_row(2), timeout=30).json()
        token = seeded["mcp"]["headers"][HEADER]
        async with mcp_client(f"{a.url}/mcp", token) as client:  # through a replica that is not the owner
            result = await client.call_tool("increment_counter", {"count": 3})
            assert not result.is_error
            owner[0].bridge.stop(signal.SIGKILL)
            with pytest.raises(Exception):  # noqa: B017 - the SDK client raises on an HTTP 502
                await client.call_tool("increment_counter", {"count": 1})
        reason = f"owner replica {owner[0].url} of this session is unreachable"
        raw = httpx.post(
            f"{a.url}/mcp",
            json=rpc_call("increment_counter", {"count": 1}, 9),
            headers={**MCP_HEADERS, HEADER: token},
        )
        assert raw.status_code == 502 and reason in raw.json()["error"]["message"] and raw.json()["id"] == 9
        for path in ("/increment_counter", "/verify", "/close_session"):
            rest = httpx.post(f"{a.url}{path}", json={}, headers={HEADER: token}, timeout=30)
            assert rest.status_code == 502 and reason in rest.json()["detail"], rest.text
        cookie = httpx.post(f"{a.url}/verify", json={}, cookies={BRIDGE_COOKIE: token}, timeout=30)
        assert cookie.status_code == 502 and reason in cookie.json()["detail"]
        assert upstream_counts(owner[0].upstream_url)["POST /increment_counter"] == 1, (
            "one call, never a retry"
        )
    finally:
        stop(owner)


def test_peers_setting_off_restores_the_refusal(counter_replicas: list[Replica], log_dir: Path) -> None:
    """``--peers ''``: nothing is forwarded; another replica's token is refused naming its issuer."""
    b = counter_replicas[1]
    args = ["--upstream-url", counter_replicas[0].upstream_url, "--server-name", "example_session_state_mgmt"]
    lone = BridgeProcess(args=[*args, "--peers", ""]).start(log_dir, timeout=60)
    try:
        token = seed(b)
        refused = httpx.post(f"{lone.url}/get_counter_value", json={}, headers={HEADER: token}, timeout=10)
        assert refused.status_code == 401, refused.text
        reason = f"issued by another replica ({b.url}), which is outside this deployment's peers (none"
        assert reason in refused.json()["detail"]
    finally:
        lone.stop()


async def test_concurrent_rollouts_through_the_balancer_stay_isolated(
    counter_replicas: list[Replica],
) -> None:
    """16 MCP rollouts at once through three replicas: each session's counter exact."""
    with Balancer([r.url for r in counter_replicas]) as balancer:

        async def one(i: int) -> None:
            rollout = await counter_mcp_client(balancer.url, i * 100, [i % 5 + 1, 2], i * 100 + i % 5 + 3)
            assert rollout.state == {"count": i * 100 + i % 5 + 3} and rollout.reward == 1.0

        await asyncio.gather(*(one(i) for i in range(16)))
