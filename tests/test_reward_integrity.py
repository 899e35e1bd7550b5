"""Reward integrity against hostile or careless input: no row, tool name, path or trajectory may
change another rollout's result, reach the upstream's request line, or crash a verify that the
upstream already scored.

The upstream is a real Gym resources server: the fault fixture (Gym's stateful counter plus faulty
tools, ``tests/fixtures/fault_injection_server.py``), which counts every request it receives by
method and path, so "nothing was forwarded" is the upstream's own word. A neighbour session with
its own counter value is read after every hostile request: it must read exactly its own state.
"""

from __future__ import annotations

import json
import socket
import string
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.service import OTHER_TOOLS_LABEL
from bridge.upstream.cookies import merge_cookies
from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row, mcp_client, upstream_url
from tests.fixtures.helpers import (
    FAULT_SPEC,
    fault_env,
    metric,
    seed,
    shared_fault_bridge,
    tools_row,
    upstream_counts,
    upstream_posts,
)

pytestmark = pytest.mark.anyio

# The request that mixed two sessions' answers on main: a row tool whose name ends the request line
# and smuggles a second request onto the pooled keep-alive connection.
SMUGGLED = (
    "get_counter_value HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
    "POST /increment_counter HTTP/1.1\r\nhost: x\r\ncontent-length: 13\r\n\r\n"
    '{"count": 95}'
)
BAD_NAMES: list[Any] = [
    SMUGGLED,
    "get_counter_value\r\n",
    "a b",
    "a?b",
    "a#b",
    "a/b",
    "../verify",
    "%2e%2e",
    "a:b",
    "ツール",
    "café",
    "x" * 129,
    "",
    "verify",
    "seed_session",
    7,
    None,
]


@pytest.fixture(scope="module")
def fault(log_dir: Path) -> BridgeProcess:
    return shared_fault_bridge(log_dir)


class Neighbour:
    """A session that must keep reading exactly its own counter value."""

    def __init__(self, bridge: BridgeProcess, value: int) -> None:
        self.bridge, self.value = bridge, value
        self.token = seed(bridge, counter_row(value))

    def check(self) -> None:
        response = httpx.post(
            f"{self.bridge.url}/get_counter_value", json={}, headers={HEADER: self.token}, timeout=30
        )
        assert response.status_code == 200 and response.json() == {"count": self.value}, response.text


def raw_post(url: str, raw_path: bytes, body: bytes = b"{}", token: str | None = None) -> tuple[int, bytes]:
    """One POST with the path bytes exactly as given (httpx would normalize them)."""
    parts = urllib.parse.urlsplit(url)
    head = [b"POST " + raw_path + b" HTTP/1.1", f"host: {parts.netloc}".encode()]
    head += [b"content-type: application/json", f"content-length: {len(body)}".encode(), b"connection: close"]
    if token is not None:
        head.append(f"{HEADER}: {token}".encode())
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, answer.partition(b"\r\n\r\n")[2]


def bad_paths_seen(upstream: str) -> list[str]:
    """Paths the upstream received that are not a route name of the MCP rule."""
    allowed = set(string.ascii_letters + string.digits + "_.-")
    seen = [key.split(" ", 1)[1] for key in upstream_counts(upstream)]
    # "/ng-rollout/0/openapi.json": the bridge's own start-up probe (does the upstream strip Gym's
    # rollout prefix?), a constant path, no stranger's byte in it.
    own = {"/not:an:mcp:name", "/ng-rollout/0/openapi.json"}
    return [p for p in seen if p not in own and not set(p[1:]) <= allowed]


# -- row tool names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES, ids=lambda n: repr(n)[:24])
def test_a_row_tool_named_against_the_mcp_rule_is_refused_and_nothing_is_forwarded(
    fault: BridgeProcess, name: Any
) -> None:
    neighbour = Neighbour(fault, 41)
    upstream = upstream_url(fault)
    before = upstream_posts(upstream)
    row = tools_row("get_counter_value")
    row["responses_create_params"]["tools"].append({"type": "function", "name": name, "parameters": {}})
    response = httpx.post(f"{fault.url}/seed_session", json=row, timeout=30)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert "responses_create_params.tools[1]" in detail and "\n" not in detail and "\r" not in detail
    assert upstream_posts(upstream) == before, "the refused seed reached the upstream"
    neighbour.check()


def test_the_reported_smuggling_cannot_mix_two_sessions(fault: BridgeProcess) -> None:
    """The issue's reproduction: an attacker's row names a tool with a smuggled request; on main the
    neighbour then read ``{"count":100}{"count":5}``."""
    neighbour = Neighbour(fault, 5)
    row = tools_row("get_counter_value", SMUGGLED)
    assert httpx.post(f"{fault.url}/seed_session", json=row, timeout=30).status_code == 400
    for _ in range(20):
        neighbour.check()
    assert bad_paths_seen(upstream_url(fault)) == []


# -- the REST surface --------------------------------------------------------------------------------

PATH_PIECES = st.text(
    alphabet=st.sampled_from([*"\r\n\t\x00\x7f ?#/%.:;", *"aZ_-09", "é", "ツ", "\u2028", "\U0001f600"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.one_of(PATH_PIECES, st.just("a" * 129), st.just("get_counter_value\r\nx: y")))
def test_rest_paths_that_break_the_rule_never_reach_the_upstream(fault: BridgeProcess, name: str) -> None:
    neighbour = _neighbour(fault)
    token = _attacker(fault)
    raw = urllib.parse.quote(name, safe="").encode()
    status, body = raw_post(fault.url, b"/" + raw, token=token)
    assert 0 < status < 500 and b"Traceback" not in body, (name, status, body)
    neighbour.check()
    assert bad_paths_seen(upstream_url(fault)) == []


_state: dict[str, Any] = {}


def _neighbour(bridge: BridgeProcess) -> Neighbour:
    if "neighbour" not in _state or _state["neighbour"].bridge is not bridge:
        _state["neighbour"] = Neighbour(bridge, 77)
    return _state["neighbour"]  # type: ignore[no-any-return]


def _attacker(bridge: BridgeProcess) -> str:
    if "attacker" not in _state:
        _state["attacker"] = seed(bridge, counter_row(0))
    return str(_state["attacker"])


async def test_a_catch_all_upstream_gets_no_bad_path_either(spawn_bridge: Any) -> None:  # type: ignore[no-untyped-def]
    """workplace_assistant dispatches any ``POST /{path}``: the bridge is the only gate."""
    bridge = spawn_bridge(["--resources-server", "workplace_assistant"])
    for name in ["a b", "x\r\nhost: evil", "../seed_session", "é", "%00"]:
        status, body = raw_post(bridge.url, b"/" + urllib.parse.quote(name, safe="").encode())
        # the bridge's own refusal (its router, or the name rule), never the upstream's answer
        assert status == 404 and (b"not an MCP tool name" in body or b"no route POST" in body), (name, body)


def test_openapi_routes_that_break_the_rule_are_skipped_with_a_warning(fault: BridgeProcess) -> None:
    listed = httpx.post(
        f"{fault.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"accept": "application/json, text/event-stream", "content-type": "application/json"},
        timeout=30,
    ).json()
    names = [t["name"] for t in listed["result"]["tools"]]
    assert "increment_counter" in names and "not:an:mcp:name" not in names
    assert "upstream route skipped, not served as a tool" in fault.log() and "not:an:mcp:name" in fault.log()


# -- names as the model emitted them ----------------------------------------------------------------------


def _response_with(names: list[str]) -> dict[str, Any]:
    return {
        "id": "resp_integrity",
        "object": "response",
        "created_at": 0,
        "model": "integrity-test",
        "output": [
            {"type": "function_call", "call_id": f"c{i}", "name": n, "arguments": "{}", "status": "completed"}
            for i, n in enumerate(names)
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def test_a_non_latin1_emitted_name_is_reported_not_a_500(fault: BridgeProcess) -> None:
    token = seed(fault, counter_row(0))
    response = httpx.post(
        f"{fault.url}/verify",
        json={"response": _response_with(["mcp__gym__ツール", "get_counter_value"])},
        headers={HEADER: token},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["reward"] == 1.0  # counter 0, expected 0: the upstream's own verdict
    assert body["_bridge"]["unresolved"] == [{"name": "mcp__gym__ツール", "reason": "unknown tool"}]
    header = response.headers["x-gym-mcp-bridge"]
    assert header.isascii() and json.loads(header)["unresolved"] == body["_bridge"]["unresolved"]


def test_the_report_header_stays_bounded(fault: BridgeProcess) -> None:
    token = seed(fault, counter_row(0))
    names = [f"mcp__elsewhere__tool_{i:04d}" for i in range(400)]
    response = httpx.post(
        f"{fault.url}/verify", json={"response": _response_with(names)}, headers={HEADER: token}, timeout=60
    )
    assert response.status_code == 200
    assert len(response.json()["_bridge"]["unresolved"]) == 400
    header = json.loads(response.headers["x-gym-mcp-bridge"])
    assert header["truncated"] is True and header["unresolved"] == 400
    assert len(response.headers["x-gym-mcp-bridge"]) <= 4096


# -- sessions, tokens, cookies, metrics --------------------------------------------------------------------


async def test_row_tool_names_share_one_metrics_label(fault: BridgeProcess) -> None:
    names = [f"row_only_tool_{i}" for i in range(5)]
    token = seed(fault, tools_row("get_counter_value", *names))
    async with mcp_client(f"{fault.url}/mcp", token) as client:
        for name in names:
            result = await client.call_tool(name, {})
            assert result.is_error  # the upstream has no such route: its 404 text, as an error
    text = httpx.get(f"{fault.url}/metrics", timeout=10).text
    assert not any(name in text for name in names)
    assert metric(fault, "gym_mcp_bridge_tool_calls_total", tool=OTHER_TOOLS_LABEL) >= 5


async def test_a_row_with_many_tools_gets_a_token_its_verifier_accepts(fault: BridgeProcess) -> None:
    names = [
        "increment_counter",
        "get_counter_value",
        *(f"tool_number_{i:03d}_with_a_long_name" for i in range(200)),
    ]
    response = httpx.post(f"{fault.url}/seed_session", json=tools_row(*names), timeout=30)
    assert response.status_code == 200, response.text
    metadata = response.json()["mcp"]
    token = metadata["headers"][HEADER]
    assert len(token) < 4096 and metadata["tool_names"] == names
    async with mcp_client(f"{fault.url}/mcp", token) as client:
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == names
        assert not (await client.call_tool("increment_counter", {"count": 3})).is_error
        value = await client.call_tool("get_counter_value", {})
        assert value.structured_content == {"count": 3}


def test_close_session_revokes_the_token_even_when_the_upstream_close_fails(spawn_bridge: Any) -> None:  # type: ignore[no-untyped-def]
    bridge = spawn_bridge(
        ["--resources-server", FAULT_SPEC.replace("FaultInjectionTestServer", "FailingCloseTestServer")],
        env=fault_env(),
    )
    token = seed(bridge, counter_row(0))
    closed = httpx.post(f"{bridge.url}/close_session", json={}, headers={HEADER: token}, timeout=30)
    assert closed.status_code == 500  # the upstream's own answer, reported as it sent it
    after = httpx.post(f"{bridge.url}/get_counter_value", json={}, headers={HEADER: token}, timeout=30)
    assert after.status_code == 409 and "closed by /close_session" in after.json()["detail"]


def test_a_typed_close_revokes_every_token_of_that_session(fault: BridgeProcess) -> None:
    """Gym's Environment Server closes by ``resources_session_id`` in the body, with no token."""

    def typed_seed(resources_id: str) -> str:
        row = {**counter_row(0), "resources_session_id": resources_id}
        response = httpx.post(f"{fault.url}/seed_session", json=row, timeout=30)
        assert response.status_code == 200, response.text
        return str(response.json()["resources_tools"]["headers"][HEADER])

    tokens = [typed_seed("rollout-7"), typed_seed("rollout-7")]
    other = typed_seed("rollout-8")
    closed = httpx.post(f"{fault.url}/close_session", json={"resources_session_id": "rollout-7"}, timeout=30)
    assert closed.status_code == 200 and len(closed.json()["sessions"]) == 2
    for token in tokens:
        after = httpx.post(f"{fault.url}/get_counter_value", json={}, headers={HEADER: token}, timeout=30)
        assert after.status_code == 409 and "closed by /close_session" in after.text, after.text
    alive = httpx.post(f"{fault.url}/get_counter_value", json={}, headers={HEADER: other}, timeout=30)
    assert alive.status_code == 200


def test_set_cookie_merges_by_name_as_a_browser_does() -> None:
    jar = "session=abc; theme=dark"
    assert merge_cookies(jar, ["session=def; Path=/; HttpOnly"]) == "theme=dark; session=def"
    assert merge_cookies(jar, ["extra=1"]) == "session=abc; theme=dark; extra=1"
    assert merge_cookies(jar, ["theme=; Max-Age=0"]) == "session=abc"
    assert merge_cookies(jar, ["theme=x; Expires=Thu, 01 Jan 1970 00:00:00 GMT"]) == "session=abc"
    assert (
        merge_cookies(jar, ["theme=light; Expires=Fri, 01 Jan 2100 00:00:00 GMT"])
        == "session=abc; theme=light"
    )
    assert merge_cookies("", ["a=1", "b=2"]) == "a=1; b=2"


def test_gyms_one_session_cookie_is_replaced_or_cleared_as_a_browser_does() -> None:
    """A Gym server's jar holds its one session cookie, and every answer sets it again. The lines
    are Starlette ``SessionMiddleware``'s own (its set and its clear format, as Gym 0.7's Starlette
    1.10 writes them)."""
    name = "SessionStateMgmtResourcesServer___example_session_state_mgmt"
    jar = f"{name}=eyJhIjogMX0=.aAbB.sig1"
    flags = "httponly; samesite=lax"
    assert merge_cookies(jar, [f"{name}=eyJhIjogMn0=.aAbC.sig2; path=/; Max-Age=1209600; {flags}"]) == (
        f"{name}=eyJhIjogMn0=.aAbC.sig2"
    )
    cleared = f"{name}=null; path=/; expires=Thu, 01 Jan 1970 00:00:00 GMT; {flags}"
    assert merge_cookies(jar, [cleared]) == ""
    assert merge_cookies(jar, [f"{name}=x; Max-Age=0"]) == ""
    assert merge_cookies(jar, [f"{name}=y; Expires=Fri, 01 Jan 2100 00:00:00 GMT"]) == f"{name}=y"
    assert merge_cookies(jar, ["other=1; path=/"]) == f"{jar}; other=1"
    assert merge_cookies(jar, [f"{name}"]) == f"{name}="
    assert merge_cookies(f" {jar} ", [f"{name}=z"]) == f"{name}=z"


# -- the session's call log -----------------------------------------------------------------------------


def verify_recorded(bridge: BridgeProcess, token: str) -> httpx.Response:
    """``/verify`` of the session's own recorded calls."""
    return httpx.post(
        f"{bridge.url}/verify",
        json={"trajectory": {"format": "recorded"}},
        headers={HEADER: token},
        timeout=60,
    )


def test_a_log_that_dropped_calls_is_never_scored_as_recorded(spawn_bridge: Any) -> None:  # type: ignore[no-untyped-def]
    """With max_calls_logged=2 a correct 3-call rollout used to score 0.0 as `recorded`, silently."""
    bridge = spawn_bridge(["--max-calls-logged", "2"])
    token = seed(bridge, counter_row(1, 6))
    for name, arguments in [("increment_counter", {"count": 2}), ("increment_counter", {"count": 3})]:
        assert httpx.post(f"{bridge.url}/{name}", json=arguments, headers={HEADER: token}).status_code == 200
    value = httpx.post(f"{bridge.url}/get_counter_value", json={}, headers={HEADER: token})
    assert value.json() == {"count": 6}  # the third call still ran
    verdict = verify_recorded(bridge, token)
    assert verdict.status_code == 409, verdict.text
    detail = verdict.json()["detail"]
    assert (
        "dropped 1 of 3 calls" in detail
        and "#3 get_counter_value" in detail
        and "max_calls_logged=2" in detail
    )


def test_a_session_log_over_its_byte_cap_still_serves_calls_but_is_incomplete(spawn_bridge: Any) -> None:  # type: ignore[no-untyped-def]
    """Large arguments (the row's own schema admits them, and so does Gym) are served and logged
    until the session's byte cap, then served unlogged: `recorded` verify says so with a 409."""
    bridge = spawn_bridge(
        ["--max-session-log-bytes", str(1024 * 1024), "--max-log-bytes", str(2 * 1024 * 1024)]
    )
    row = {**tools_row("increment_counter", "get_counter_value"), "expected_count": 8}
    tokens = [seed(bridge, row) for _ in range(3)]
    pad = "x" * (300 * 1024)
    for token in tokens:
        for _ in range(8):  # 8 x 300 KiB of arguments per session: over its 1 MiB cap
            response = httpx.post(
                f"{bridge.url}/increment_counter",
                json={"count": 1, "pad": pad},
                headers={HEADER: token},
                timeout=30,
            )
            assert response.status_code == 200, response.text
        verdict = verify_recorded(bridge, token)
        assert verdict.status_code == 409, verdict.text
        assert (
            "max_session_log_bytes" in verdict.json()["detail"] or "max_log_bytes" in verdict.json()["detail"]
        )
    # the response the harness kept is still scored by the upstream
    kept = httpx.post(
        f"{bridge.url}/verify",
        json={
            **counter_row(0, 8),
            "response": {
                "id": "r",
                "object": "response",
                "created_at": 0,
                "model": "m",
                "output": [],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            },
        },
        headers={HEADER: tokens[0]},
        timeout=60,
    )
    assert kept.status_code == 200 and kept.json()["reward"] == 1.0, kept.text[:800]
