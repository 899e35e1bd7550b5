"""Hostile input and security defaults: limits, fuzzing, API key, DNS rebinding, bind warnings.

Fuzzing uses hypothesis against a live bridge (external mode in front of the fault fixture
server): JSON-RPC messages and raw bodies at ``/mcp``, JSON and raw bodies at every REST route.
Every case must answer below 500, without a traceback, within 10 s. The bridge publishes no
OpenAPI document of its own (its REST surface is Gym's, forwarded), so schemathesis has nothing
to run against; hypothesis covers that surface instead.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row, mcp_client, upstream_url
from tests.fixtures.helpers import (
    API_KEY,
    MCP_HEADERS,
    bridge_log_problems,
    external_bridge,
    mcp_post,
    metric,
    openapi_row,
    rpc_call,
    seed,
    shared_fault_bridge,
    text_of,
    upstream_posts,
)

pytestmark = pytest.mark.anyio
FUZZ_CASES = 250  # per target (test); four targets


@pytest.fixture(scope="module")
def upstream(log_dir: Path) -> str:
    return upstream_url(shared_fault_bridge(log_dir))


@pytest.fixture(scope="module")
def limited(log_dir: Path, upstream: str) -> Iterator[BridgeProcess]:
    bridge = external_bridge(
        log_dir,
        upstream,
        "--max-body-bytes", "65536",
        "--max-header-bytes", "4096",
        "--max-json-depth", "16",
        "--max-argument-bytes", "2048",
    )  # fmt: skip
    yield bridge
    bridge.stop()


# -- limits ------------------------------------------------------------------------------------


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": [value]}
    return value


def test_each_limit_is_a_clear_4xx_and_never_reaches_the_upstream(
    limited: BridgeProcess, upstream: str
) -> None:
    token = seed(limited, openapi_row(0))
    before = upstream_posts(upstream)
    url = limited.url
    cases: list[tuple[str, httpx.Response, int, str]] = [
        (
            "REST body size",
            httpx.post(f"{url}/seed_session", content=b"{" + b" " * 70000 + b"}", timeout=10),
            413,
            "request body too large",
        ),
        (
            "MCP body size",
            mcp_post(limited, rpc_call("increment_counter", {"count": 1, "pad": "x" * 70000}), token),
            413,
            "request body too large",
        ),
        (
            "header size",
            httpx.post(f"{url}/seed_session", json={}, headers={"x-pad": "x" * 5000}, timeout=10),
            431,
            "request headers too large",
        ),
        (
            "MCP header size",
            mcp_post(limited, rpc_call("increment_counter", {"count": 1}), token, **{"x-pad": "x" * 5000}),
            431,
            "request headers too large",
        ),
        (
            "REST JSON depth",
            httpx.post(f"{url}/verify", json=_deep(20), headers={HEADER: token}, timeout=10),
            400,
            "nested too deeply",
        ),
        (
            "MCP JSON depth",
            mcp_post(limited, rpc_call("increment_counter", {"count": _deep(20)}), token),
            400,
            "nested too deeply",
        ),
        (
            "REST argument size",
            httpx.post(
                f"{url}/increment_counter", json={"count": 1, "pad": "x" * 3000}, headers={HEADER: token}
            ),
            413,
            "tool arguments too large",
        ),
        (
            "MCP argument size",
            mcp_post(limited, rpc_call("increment_counter", {"count": 1, "pad": "x" * 3000}), token),
            413,
            "tool arguments too large",
        ),
    ]
    for name, response, status, reason in cases:
        assert response.status_code == status, (name, response.status_code, response.text)
        text = response.text
        assert reason in text and "Traceback" not in text, (name, text)
        assert len(text.splitlines()) == 1, (name, text)
    assert upstream_posts(upstream) == before, "a request over a limit reached the upstream"
    # just under every limit is served
    ok = mcp_post(limited, rpc_call("increment_counter", {"count": 1, "pad": "x" * 1500}), token)
    assert ok.status_code == 200 and not ok.json()["result"].get("isError"), ok.text
    assert mcp_post(limited, rpc_call("get_counter_value", {}), token).json()["result"][
        "structuredContent"
    ] == {"count": 1}


# -- fuzzing ----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
METHODS = [
    "initialize",
    "notifications/initialized",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "prompts/list",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
]
TOOLS = [
    "increment_counter",
    "get_counter_value",
    "fail_500",
    "invalid_json",
    "no_such_tool",
    "",
    "seed_session",
]
jsonrpc_messages = st.fixed_dictionaries(
    {"method": st.sampled_from(METHODS) | st.text(max_size=15)},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0"]) | json_values,
        "id": st.integers() | st.text(max_size=8) | st.none() | json_values,
        "params": st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(TOOLS) | json_values,
                "arguments": st.dictionaries(st.sampled_from(["count", "seconds", "x"]), json_values)
                | json_values,
                "protocolVersion": st.sampled_from(["2025-11-25", "2024-11-05", "1999-01-01"]) | json_values,
                "_meta": json_values,
                "cursor": json_values,
            },
        )
        | json_values,
    },
)
mcp_bodies = (
    jsonrpc_messages.map(json.dumps)
    | st.lists(jsonrpc_messages, max_size=3).map(json.dumps)
    | json_values.map(json.dumps)
).map(str.encode) | st.binary(max_size=300)
rest_bodies = (
    st.dictionaries(
        st.sampled_from(
            ["responses_create_params", "response", "trajectory", "initial_count", "expected_count", "count"]
        )
        | st.text(max_size=8),
        json_values,
        max_size=5,
    ).map(json.dumps)
    | json_values.map(json.dumps)
).map(str.encode) | st.binary(max_size=300)
REST_ROUTES = ["/seed_session", "/verify", "/close_session", "/aggregate_metrics", "/increment_counter", "/x"]
HEADER_SETS = ["none", "token", "garbage token", "bearer"]


class Fuzz:
    """One fuzz target's client and tallies; ``send`` checks each case, ``check`` the whole run."""

    def __init__(self, bridge: BridgeProcess, token: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.bridge = bridge
        self.token = token
        self.capsys = capsys
        self.http = httpx.Client(timeout=10)
        self.cases = 0
        self.statuses: dict[int, int] = {}

    def send(self, path: str, body: bytes, headers: str, content_type: str | None) -> None:
        sent = dict(MCP_HEADERS) if path == "/mcp" else {}
        if content_type is not None:
            sent["content-type"] = content_type
        if headers == "token":
            sent[HEADER] = self.token
        elif headers == "garbage token":
            sent[HEADER] = "eyJhbGciOiJIUzI1NiJ9.e30.x"
        elif headers == "bearer":
            sent["authorization"] = f"Bearer {self.token}"
        began = time.monotonic()
        response = self.http.post(f"{self.bridge.url}{path}", content=body, headers=sent)
        elapsed = time.monotonic() - began
        self.cases += 1
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, (path, body[:200], response.status_code, response.text[:300])
        assert "Traceback" not in response.text, (path, body[:200], response.text[:300])
        assert elapsed < 10, (path, body[:200], elapsed)

    def check(self, target: str) -> None:
        """Every case of this test ran (hypothesis did not stop short) and the bridge is still healthy."""
        assert self.cases >= FUZZ_CASES, f"{target}: only {self.cases} of {FUZZ_CASES} cases ran"
        statuses = dict(sorted(self.statuses.items()))
        with self.capsys.disabled():
            print(f"\n[figures] fuzz {target}: {self.cases} cases, statuses {statuses}, 0 with 5xx")
        assert self.bridge.health()["status"] == "ok"


@pytest.fixture(scope="module")
def fuzz_bridge(log_dir: Path, upstream: str) -> Iterator[tuple[BridgeProcess, str]]:
    bridge = external_bridge(log_dir, upstream, "--tool-timeout-s", "3")
    yield bridge, seed(bridge, openapi_row(0))
    assert bridge_log_problems(bridge.log()) == []
    bridge.stop()


@pytest.fixture
def fuzz(fuzz_bridge: tuple[BridgeProcess, str], capsys: pytest.CaptureFixture[str]) -> Iterator[Fuzz]:
    """A fresh tally per test; the bridge and its session are the module's."""
    target = Fuzz(*fuzz_bridge, capsys)
    yield target
    target.http.close()


FUZZ_SETTINGS = settings(
    max_examples=FUZZ_CASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_fuzz_mcp_jsonrpc(fuzz: Fuzz) -> None:
    @FUZZ_SETTINGS
    @given(body=mcp_bodies, headers=st.sampled_from(HEADER_SETS))
    def case(body: bytes, headers: str) -> None:
        fuzz.send("/mcp", body, headers, "application/json")

    case()
    fuzz.check("MCP JSON-RPC")


def test_fuzz_mcp_content_types(fuzz: Fuzz) -> None:
    @FUZZ_SETTINGS
    @given(
        body=mcp_bodies,
        content_type=st.sampled_from(
            ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=x"]
        ),
    )
    def case(body: bytes, content_type: str) -> None:
        fuzz.send("/mcp", body, "token", content_type)

    case()
    fuzz.check("MCP content types")


def test_fuzz_rest_surface(fuzz: Fuzz) -> None:
    @FUZZ_SETTINGS
    @given(route=st.sampled_from(REST_ROUTES), body=rest_bodies, headers=st.sampled_from(HEADER_SETS))
    def case(route: str, body: bytes, headers: str) -> None:
        fuzz.send(route, body, headers, "application/json")

    case()
    fuzz.check("REST routes")


def test_fuzz_rest_tool_names(fuzz: Fuzz) -> None:
    @FUZZ_SETTINGS
    @given(
        name=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=30)
    )
    def case(name: str) -> None:
        fuzz.send("/" + urllib.parse.quote(name, safe=""), b"{}", "token", "application/json")

    case()
    fuzz.check("REST tool names")


# -- security defaults ------------------------------------------------------------------------


GUARDED_ROUTES = ("/seed_session", "/verify", "/close_session", "/increment_counter", "/aggregate_metrics")
NEAR_MISSES: list[tuple[str, dict[str, str] | dict[bytes, bytes]]] = [
    ("no header", {}),
    ("empty", {"authorization": ""}),
    ("scheme only", {"authorization": "Bearer"}),
    ("wrong key, same length", {"authorization": "Bearer " + "x" * len(API_KEY)}),
    ("last character wrong", {"authorization": f"Bearer {API_KEY[:-1]}{chr(ord(API_KEY[-1]) ^ 1)}"}),
    ("prefix of the key", {"authorization": f"Bearer {API_KEY[:-1]}"}),
    ("short prefix", {"authorization": f"Bearer {API_KEY[:4]}"}),
    ("key plus a suffix", {"authorization": f"Bearer {API_KEY}x"}),
    ("key twice", {"authorization": f"Bearer {API_KEY}{API_KEY}"}),
    ("no scheme", {"authorization": API_KEY}),
    ("Basic scheme", {"authorization": f"Basic {API_KEY}"}),
    ("Token scheme", {"authorization": f"Token {API_KEY}"}),
    ("two spaces", {"authorization": f"Bearer  {API_KEY}"}),
    ("another header", {"x-api-key": API_KEY, "api-key": API_KEY}),
    ("non-ASCII, same length", {b"authorization": f"Bearer {API_KEY[:-1]}".encode() + b"\xe9"}),
    ("non-ASCII bytes", {b"authorization": b"Bearer \xff\xfe\x80" + API_KEY.encode()}),
]


def test_api_key_refuses_every_near_miss_without_reaching_the_upstream(log_dir: Path, upstream: str) -> None:
    bridge = external_bridge(log_dir, upstream, GYM_MCP_BRIDGE_API_KEY=API_KEY)
    try:
        before = upstream_posts(upstream)
        with httpx.Client(timeout=10) as http:
            for label, headers in NEAR_MISSES:
                for route in GUARDED_ROUTES:
                    response = http.post(f"{bridge.url}{route}", json=counter_row(0), headers=headers)
                    assert response.status_code == 401, (label, route, response.text)
                    assert "missing or wrong API key" in response.json()["detail"], (label, route)
        assert upstream_posts(upstream) == before, "a request without the right API key reached the upstream"
        good = httpx.post(
            f"{bridge.url}/seed_session",
            json=counter_row(0),
            headers={"authorization": f"Bearer {API_KEY}"},
            timeout=10,
        )
        assert good.status_code == 200, good.text
        assert upstream_posts(upstream) == before + 1
        # probes stay open; /mcp is guarded by the session token, not the API key
        assert httpx.get(f"{bridge.url}/healthz", timeout=5).status_code == 200
        token = good.json()["mcp"]["headers"][HEADER]
        served = mcp_post(bridge, rpc_call("increment_counter", {"count": 1}), token)
        assert served.status_code == 200 and not served.json()["result"].get("isError")
    finally:
        bridge.stop()


def _basic(user: bytes, password: bytes) -> str:
    return "Basic " + base64.b64encode(user + b":" + password).decode()


BASIC_NEAR_MISSES: list[tuple[str, str]] = [
    ("wrong password, same length", _basic(b"eval", b"x" * len(API_KEY))),
    ("empty password", _basic(b"eval", b"")),
    ("the key as the user name", _basic(API_KEY.encode(), b"")),
    ("no colon", "Basic " + base64.b64encode(API_KEY.encode()).decode()),
    ("password a prefix of the key", _basic(b"eval", API_KEY[:-1].encode())),
    ("password the key plus a suffix", _basic(b"eval", API_KEY.encode() + b"x")),
    ("not base64", "Basic " + base64.b64encode(b"eval:" + API_KEY.encode()).decode() + "!"),
    ("two spaces", "Basic  " + base64.b64encode(b"eval:" + API_KEY.encode()).decode()),
    ("scheme only", "Basic"),
    ("Bearer of the Basic credentials", "Bearer " + base64.b64encode(b"eval:" + API_KEY.encode()).decode()),
]


def test_api_key_as_the_basic_password_is_accepted_and_near_misses_are_not(
    log_dir: Path, upstream: str
) -> None:
    """RFC 7617 Basic with the key as the password (any user name): what clients that can only put a
    credential in the URL (http://user:KEY@host/) send. Every near miss is a 401 that never reaches
    the upstream, on the REST routes and on GET /openapi.json."""
    bridge = external_bridge(log_dir, upstream, GYM_MCP_BRIDGE_API_KEY=API_KEY)
    try:
        before = upstream_posts(upstream)
        refused_before = metric(bridge, "gym_mcp_bridge_rejections_total", reason="api_key")
        with httpx.Client(timeout=10) as http:
            for label, value in BASIC_NEAR_MISSES:
                headers = {"authorization": value}
                for route in GUARDED_ROUTES:
                    response = http.post(f"{bridge.url}{route}", json=counter_row(0), headers=headers)
                    assert response.status_code == 401, (label, route, response.text)
                    assert "missing or wrong API key" in response.json()["detail"], (label, route)
                document = http.get(f"{bridge.url}/openapi.json", headers=headers)
                assert document.status_code == 401, (label, document.text)
            assert http.get(f"{bridge.url}/openapi.json").status_code == 401
        assert upstream_posts(upstream) == before, "a request without the right API key reached the upstream"
        assert metric(bridge, "gym_mcp_bridge_rejections_total", reason="api_key") == refused_before + (
            len(BASIC_NEAR_MISSES) * (len(GUARDED_ROUTES) + 1) + 1
        )
        # any user name, the scheme in any case, and credentials in the URL as httpx sends them
        accepted = [
            _basic(b"eval", API_KEY.encode()),
            _basic(b"", API_KEY.encode()),
            _basic("é".encode(), API_KEY.encode()),
            "basic " + base64.b64encode(b"x:" + API_KEY.encode()).decode(),
        ]
        for value in accepted:
            good = httpx.post(
                f"{bridge.url}/seed_session",
                json=counter_row(0),
                headers={"authorization": value},
                timeout=10,
            )
            assert good.status_code == 200, (value, good.text)
        in_url = httpx.URL(bridge.url).copy_with(username="evaluator", password=API_KEY)
        assert httpx.get(f"{in_url}/openapi.json", timeout=10).status_code == 200
        assert upstream_posts(upstream) == before + 4
        log = bridge.log()
        assert API_KEY not in log
        assert not [v for v in accepted if v.split(" ", 1)[1] in log], "a credential reached the log"
    finally:
        bridge.stop()


def test_api_key_file_is_read_once_with_its_trailing_newline_stripped(
    log_dir: Path, upstream: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text(API_KEY + "\n")
    bridge = external_bridge(log_dir, upstream, "--api-key-file", str(key_file))
    try:
        key_file.write_text("changed-after-startup-0123456789\n")  # read at startup, not per request
        auth = {"authorization": f"Bearer {API_KEY}"}
        assert httpx.post(f"{bridge.url}/seed_session", json=counter_row(0), headers=auth).status_code == 200
        changed = {"authorization": "Bearer changed-after-startup-0123456789"}
        assert (
            httpx.post(f"{bridge.url}/seed_session", json=counter_row(0), headers=changed).status_code == 401
        )
        assert "without an api_key" not in bridge.log()
    finally:
        bridge.stop()
    both = BridgeProcess(
        args=["--upstream-url", upstream, "--api-key-file", str(key_file)],
        env={"GYM_MCP_BRIDGE_API_KEY": API_KEY},
    ).start(log_dir, wait_ready=False)
    assert both.proc is not None and both.proc.wait(60) == 2, both.log()
    assert "give api_key or api_key_file, not both" in both.log()


def test_non_loopback_bind_without_api_key_warns(log_dir: Path, upstream: str) -> None:
    warning = "without an api_key"
    open_bridge = BridgeProcess(args=["--upstream-url", upstream], host="0.0.0.0").start(log_dir, timeout=60)
    keyed = BridgeProcess(args=["--upstream-url", upstream, "--api-key", API_KEY], host="0.0.0.0").start(
        log_dir, timeout=60
    )
    loopback = external_bridge(log_dir, upstream)
    try:
        assert warning in open_bridge.log()
        assert warning not in keyed.log()
        assert warning not in loopback.log()
    finally:
        for bridge in (open_bridge, keyed, loopback):
            bridge.stop()


async def test_dns_rebinding_protection_on_by_default(log_dir: Path, upstream: str) -> None:
    bridge = external_bridge(log_dir, upstream)
    try:
        token = seed(bridge, counter_row(0))
        before = upstream_posts(upstream)
        evil_host = {"host": "attacker.example"}
        evil_origin = {"origin": "http://attacker.example"}
        assert mcp_post(bridge, rpc_call("get_counter_value", {}), token, **evil_host).status_code == 421
        assert mcp_post(bridge, rpc_call("get_counter_value", {}), token, **evil_origin).status_code == 403
        rest_host = httpx.post(
            f"{bridge.url}/seed_session", json=counter_row(0), headers=evil_host, timeout=10
        )
        assert rest_host.status_code == 421 and "allowed_hosts" in rest_host.json()["detail"]
        rest_origin = httpx.post(
            f"{bridge.url}/seed_session", json=counter_row(0), headers=evil_origin, timeout=10
        )
        assert rest_origin.status_code == 403 and "allowed_origins" in rest_origin.json()["detail"]
        assert upstream_posts(upstream) == before
        # same-origin browser pages and the usual loopback names are served; probes are exempt
        local = {"origin": bridge.url, "host": f"localhost:{bridge.port}"}
        assert mcp_post(bridge, rpc_call("get_counter_value", {}), token, **local).status_code == 200
        assert httpx.get(f"{bridge.url}/healthz", headers=evil_host, timeout=5).status_code == 200
    finally:
        bridge.stop()


async def test_dns_rebinding_protection_stays_on_when_bound_to_every_address(
    log_dir: Path, upstream: str
) -> None:
    """As in a container (bound to 0.0.0.0 behind ``-p 127.0.0.1:8000:8000``): still on."""
    bridge = BridgeProcess(
        args=["--upstream-url", upstream, "--server-name", "fault_injection_server"], host="0.0.0.0"
    ).start(log_dir, timeout=60)
    try:
        token = seed(bridge, counter_row(0), host_header=f"localhost:{bridge.port}")
        evil = {"host": "attacker.example"}
        assert mcp_post(bridge, rpc_call("get_counter_value", {}), token, **evil).status_code == 421
        rest = httpx.post(f"{bridge.url}/seed_session", json=counter_row(0), headers=evil, timeout=10)
        assert rest.status_code == 421
        local = {"host": f"127.0.0.1:{bridge.port}"}
        assert mcp_post(bridge, rpc_call("get_counter_value", {}), token, **local).status_code == 200
    finally:
        bridge.stop()


async def test_dns_rebinding_allow_lists_are_configurable(log_dir: Path, upstream: str) -> None:
    custom = external_bridge(
        log_dir, upstream, "--allowed-hosts", "gym.internal:*", "--allowed-origins", "https://ui.example"
    )
    off = external_bridge(log_dir, upstream, "--allowed-hosts", "*")
    try:
        token = seed(custom, counter_row(0), host_header=f"gym.internal:{custom.port}")
        ok = {"host": f"gym.internal:{custom.port}", "origin": "https://ui.example"}
        assert mcp_post(custom, rpc_call("get_counter_value", {}), token, **ok).status_code == 200
        # the list extends the defaults (loopback names stay served); any other host is refused
        assert mcp_post(custom, rpc_call("get_counter_value", {}), token).status_code == 200
        other_host = {"host": f"other.internal:{custom.port}"}
        assert mcp_post(custom, rpc_call("get_counter_value", {}), token, **other_host).status_code == 421
        anything = {"host": "anything.example", "origin": "http://elsewhere.example"}
        other = seed(off, counter_row(0))
        assert mcp_post(off, rpc_call("get_counter_value", {}), other, **anything).status_code == 200
    finally:
        custom.stop()
        off.stop()


HOSTS = [
    "localhost", "localhost:8000", "localhost:", "LOCALHOST:8000", "localhost.evil.example:8000",
    "localhostevil:8000", "localhost:8000.evil.example", "127.0.0.1:1", "127.0.0.1", "[::1]:8000", "[::1]",
    "::1", "gym.internal", "gym.internal:1", "gym.internal:*", "exact.example", "exact.example:1",
    "bridge.svc:8000", "attacker.example", "", " localhost:8000",
]  # fmt: skip
ORIGINS = [
    "", "http://localhost", "http://localhost:8000", "https://127.0.0.1:9", "http://localhost.evil.example",
    "http://[::1]:1", "https://ui.example", "https://ui.example:443", "null", "http://attacker.example",
]  # fmt: skip


@pytest.mark.parametrize("extra", [None, ["gym.internal:*", "exact.example"]])
async def test_rebinding_allow_lists_admit_exactly_what_the_mcp_sdk_admits(extra: list[str] | None) -> None:
    """The guard's own Host/Origin check (one set lookup and one prefix test per request) against the
    MCP SDK's ``TransportSecurityMiddleware`` on the same allow-lists, as its answer to each header
    pair: what the SDK refuses the bridge refuses with the same status, and nothing else."""
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.requests import Request

    from bridge.http.guard import AllowList, rebinding_protection, rebinding_refusal
    from bridge.settings import Settings

    security = rebinding_protection(
        Settings(allowed_hosts=extra, allowed_origins=["https://ui.example"] if extra else None),
        "bridge.svc",
        "http://bridge.svc:8000",
    )
    sdk = TransportSecurityMiddleware(security)
    hosts, origins = AllowList(security.allowed_hosts or []), AllowList(security.allowed_origins or [])
    admitted = 0
    for host in HOSTS:
        for origin in ORIGINS:
            headers = {b"host": host.encode(), **({b"origin": origin.encode()} if origin else {})}
            request = Request({"type": "http", "method": "GET", "headers": list(headers.items())})
            theirs = await sdk.validate_request(request)
            ours = rebinding_refusal(headers, hosts, origins)
            expected = None if theirs is None else theirs.status_code
            assert (ours and ours[0]) == expected, (host, origin, ours, expected)
            admitted += theirs is None
    assert admitted > 10, "some pairs pass, so both sides were asked something"


async def test_mcp_requires_a_valid_token_for_every_tool_call(log_dir: Path) -> None:
    bridge = shared_fault_bridge(log_dir)
    async with mcp_client(f"{bridge.url}/mcp") as client:
        for tool in ("increment_counter", "get_counter_value", "slow_tool", "fail_500"):
            result = await client.call_tool(tool, {})
            assert result.is_error and "missing session token" in text_of(result)


def test_json_depth_is_judged_alike_on_small_and_large_bodies() -> None:
    """Large bodies count brackets a different way (``find`` until past the limit): a deep value at
    the end of a 64 KiB argument is still refused; brackets inside strings and many shallow ones
    are not depth."""
    from bridge.http.requests import json_too_deep

    pad = "x" * 65536
    deep_tail = '{"a": "' + pad + '", "b": ' + "[" * 30 + "]" * 30 + "}"
    in_string = '{"a": "' + "[{" * 40 + pad + '"}'
    shallow = '{"a": "' + pad + '", "b": [' + ",".join(["[1]"] * 100) + "]}"
    for text, limit, deep in (
        (deep_tail, 20, True),
        (deep_tail, 40, False),
        (in_string, 20, False),
        (shallow, 20, False),
    ):
        body = text.encode()
        assert len(body) > 4096
        assert json_too_deep(body, limit) is deep, (text[-80:], limit)
        small = text.replace(pad, "x").encode()  # the same shape under 4 KiB: the other counting
        assert len(small) < 4096 and json_too_deep(small, limit) is deep
