"""Every refusal the bridge makes itself names its failure in NeMo Gym 0.7's shared vocabulary.

A table of real refusals, each made by a real bridge in front of the fault-injection Gym server
(``tests/fixtures/fault_injection_server.py``): the REST body carries ``failure_kind``,
``failure_reason`` (the ``detail`` line and what a retry can do) and ``terminal``; on ``/mcp`` an
``isError`` result carries them in ``_meta`` (read through the official MCP SDK client), a JSON-RPC
error in ``error.data``. The upstream's own answers (a Gym 422) pass through untouched, and the names
are checked against the real ``nemo_gym.failure_kinds`` of the Gym 0.7.0 environment, so a Gym
release that renames one fails here.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge import failures
from tests.fixtures.bridges import HEADER, BridgeProcess, free_port, mcp_client, upstream_url
from tests.fixtures.helpers import (
    MCP_HEADERS,
    claims_of,
    external_bridge,
    forge,
    metric,
    openapi_row,
    rpc_call,
    seed,
    shared_fault_bridge,
    text_of,
)

pytestmark = pytest.mark.anyio

API_KEY = "failure-kinds-api-key-0123456789abcdef"
OTHER_KEY = "another-deployment-key-0123456789abcdef"


@pytest.fixture(scope="module")
def fault(log_dir: Path) -> BridgeProcess:
    """The shared managed bridge on the fault server, ``--tool-timeout-s 2``."""
    return shared_fault_bridge(log_dir)


@pytest.fixture(scope="module")
def capped(fault: BridgeProcess, log_dir: Path) -> Iterator[BridgeProcess]:
    """An external bridge in front of the same upstream: one unfinished session at most, API key on."""
    bridge = external_bridge(log_dir, upstream_url(fault), "--max-sessions", "1", "--api-key", API_KEY)
    yield bridge
    bridge.stop()


def _closed(bridge: BridgeProcess) -> str:
    token = seed(bridge, openapi_row(0))
    assert httpx.post(f"{bridge.url}/close_session", json={}, headers={HEADER: token}).status_code == 200
    return token


def _orphaned(bridge: BridgeProcess) -> str:
    """A valid token whose owner replica (a loopback port nothing listens on) cannot be reached."""
    return forge({**claims_of(seed(bridge, openapi_row(0))), "iss": f"http://127.0.0.1:{free_port()}"})


def _expired(bridge: BridgeProcess) -> str:
    claims = claims_of(seed(bridge, openapi_row(0)))
    return forge(
        {**claims, "iat": claims["iat"] - 7200, "nbf": claims["nbf"] - 7200, "exp": int(time.time()) - 60}
    )


@dataclass(frozen=True)
class Case:
    name: str
    request: Callable[[BridgeProcess, BridgeProcess, Path], httpx.Response]
    status: int
    kind: str
    terminal: bool
    retry: str  # what failure_reason says a retry can do


def _post(
    bridge: BridgeProcess, path: str, body: Any, token: str | None = None, **headers: str
) -> httpx.Response:
    if token is not None:
        headers[HEADER] = token
    return httpx.post(f"{bridge.url}{path}", json=body, headers=headers, timeout=30)


def _restarted(fault: BridgeProcess, capped: BridgeProcess, log_dir: Path) -> httpx.Response:
    """A session of a bridge that restarted on the same address (same key): named lost."""
    port = free_port()
    args = ["--upstream-url", upstream_url(fault), "--server-name", "fault_injection_server"]
    args += ["--advertise-url", f"http://127.0.0.1:{port}"]
    first = BridgeProcess(args=args, port=port).start(log_dir, timeout=60)
    token = seed(first, openapi_row(0))
    first.stop()
    time.sleep(1.1)  # a token signed in an earlier second than the new process's start
    second = BridgeProcess(args=args, port=port).start(log_dir, timeout=60)
    try:
        return _post(second, "/get_counter_value", {}, token)
    finally:
        second.stop()


def _cap(fault: BridgeProcess, capped: BridgeProcess, log_dir: Path) -> httpx.Response:
    key = {"authorization": f"Bearer {API_KEY}"}
    assert _post(capped, "/seed_session", openapi_row(0), **key).status_code == 200
    return _post(capped, "/seed_session", openapi_row(0), **key)


REST = [
    Case(
        "api key missing",
        lambda f, c, _: _post(c, "/seed_session", openapi_row(0)),
        401,
        "gym_mcp_bridge:api_key",
        True,
        "terminal",
    ),
    Case(
        "token forged",
        lambda f, c, _: _post(f, "/get_counter_value", {}, forge(claims_of(seed(f)), OTHER_KEY)),
        401,
        "gym_mcp_bridge:token_invalid",
        False,
        "re-run the rollout",
    ),
    Case(
        "token expired",
        lambda f, c, _: _post(f, "/get_counter_value", {}, _expired(f)),
        401,
        "session_expired",
        False,
        "re-run the rollout",
    ),
    Case(
        "session ended",
        lambda f, c, _: _post(f, "/get_counter_value", {}, _closed(f)),
        409,
        "session_lost",
        False,
        "re-run the rollout",
    ),
    Case("session restarted", _restarted, 409, "session_lost", False, "re-run the rollout"),
    Case(
        "owner unreachable",
        lambda f, c, _: _post(f, "/get_counter_value", {}, _orphaned(f)),
        502,
        "transport_unreachable",
        False,
        "re-run the rollout",
    ),
    Case("seed refused", _cap, 503, "gym_mcp_bridge:cap", False, "can succeed later"),
    Case(
        "upstream timeout",
        lambda f, c, _: _post(f, "/slow_tool", {"seconds": 5}, seed(f, openapi_row(0))),
        504,
        "transport_timeout",
        False,
        "can succeed later",
    ),
]


@pytest.mark.parametrize("case", REST, ids=[case.name for case in REST])
def test_rest_refusal_names_its_failure_in_gyms_words(
    case: Case, fault: BridgeProcess, capped: BridgeProcess, log_dir: Path
) -> None:
    counted = metric(fault, "gym_mcp_bridge_refusals_total", failure_kind=case.kind)
    answer = case.request(fault, capped, log_dir)
    assert answer.status_code == case.status, answer.text
    body = answer.json()
    assert set(body) == {"detail", "failure_kind", "failure_reason", "terminal"}, body
    assert (body["failure_kind"], body["terminal"]) == (case.kind, case.terminal), body
    assert body["failure_reason"].startswith(body["detail"]) and case.retry in body["failure_reason"], body
    assert "\n" not in body["failure_reason"]
    if case.name not in ("api key missing", "seed refused", "session restarted"):  # other bridges
        assert metric(fault, "gym_mcp_bridge_refusals_total", failure_kind=case.kind) == counted + 1


async def test_mcp_refusals_name_their_failure_in_the_results_meta(fault: BridgeProcess) -> None:
    cases = [
        (None, "gym_mcp_bridge:token_missing", True),
        (forge(claims_of(seed(fault)), OTHER_KEY), "gym_mcp_bridge:token_invalid", False),
        (_expired(fault), "session_expired", False),
        (_closed(fault), "session_lost", False),
    ]
    for token, kind, terminal in cases:
        async with mcp_client(f"{fault.url}/mcp", token) as client:
            result = await client.call_tool("get_counter_value", {})
        assert result.is_error and result.meta is not None, result
        assert (result.meta["failure_kind"], result.meta["terminal"]) == (kind, terminal), result.meta
        text = text_of(result)
        assert "\n" not in text and result.meta["failure_reason"].startswith(text), result.meta
    async with mcp_client(f"{fault.url}/mcp", seed(fault, openapi_row(0))) as client:
        slow = await client.call_tool("slow_tool", {"seconds": 5})
    assert slow.is_error and slow.meta is not None and slow.meta["failure_kind"] == "transport_timeout"


def test_mcp_errors_name_their_failure_in_the_error_data(fault: BridgeProcess) -> None:
    answer = httpx.post(
        f"{fault.url}/mcp",
        json=rpc_call("get_counter_value", {}, 7),
        headers={**MCP_HEADERS, HEADER: _orphaned(fault)},
        timeout=30,
    )
    assert answer.status_code == 502, answer.text
    error = answer.json()["error"]
    assert error["data"]["failure_kind"] == "transport_unreachable" and error["data"]["terminal"] is False
    assert error["data"]["failure_reason"].startswith(error["message"])
    listed = httpx.post(
        f"{fault.url}/mcp",
        json={"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}},
        headers={**MCP_HEADERS, HEADER: _closed(fault), "mcp-protocol-version": "2025-06-18"},
        timeout=30,
    )
    refused = listed.json()["error"]
    assert refused["data"]["failure_kind"] == "session_lost", refused


async def test_the_upstreams_own_answers_pass_through_untouched(fault: BridgeProcess) -> None:
    token = seed(fault, openapi_row(0))
    bad = {"count": "not a number"}
    via = _post(fault, "/increment_counter", bad, token)
    direct = httpx.post(f"{upstream_url(fault)}/increment_counter", json=bad, timeout=30)
    assert via.status_code == direct.status_code == 422
    assert via.content == direct.content and "failure_kind" not in via.json()
    async with mcp_client(f"{fault.url}/mcp", token) as client:
        result = await client.call_tool("increment_counter", bad)
    assert result.is_error and result.meta is None, (
        "the upstream's own error answer carries no bridge failure"
    )


def test_the_names_are_gym_0_7s(gym07_python: Path) -> None:
    """The copy of Gym's vocabulary equals ``nemo_gym.failure_kinds.FAILURE_KINDS``, and every name the
    bridge answers is registered there or namespaced as Gym's own check accepts."""
    names = sorted({failures.failure_kind(kind) for kind in failures.KINDS} | {failures.failure_kind("x")})
    script = (
        "import json, sys\n"
        "from nemo_gym import failure_kinds as f\n"
        "names = json.loads(sys.stdin.read())\n"
        "print(json.dumps({'vocabulary': sorted(f.FAILURE_KINDS),"
        " 'unaccepted': [n for n in names if not (f.is_registered(n) or f.is_namespaced(n))]}))\n"
    )
    done = subprocess.run(
        [str(gym07_python), "-c", script],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    gym = json.loads(done.stdout)
    assert sorted(failures.GYM_FAILURE_KINDS) == gym["vocabulary"]
    assert gym["unaccepted"] == []
