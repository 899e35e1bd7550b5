"""The Gym REST surface, token refusals, the session cap and bad input, against real Gym servers."""

from __future__ import annotations

import base64
import json
import time

import httpx
import jwt
import pytest
from starlette.responses import Response

from tests.fixtures.bridges import HEADER, SECRET, BridgeProcess, counter_row, gym_data, mcp_client
from tests.fixtures.helpers import claims_of

pytestmark = pytest.mark.anyio


def forged(token: str, key: str = SECRET, **changes: object) -> str:
    claims = {**claims_of(token), **changes}
    return jwt.encode(claims, key, algorithm="HS256")


def tamper(token: str) -> str:
    head, payload, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sid"] = "0" * 32
    new_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{new_payload}.{sig}"


def counter(bridge: BridgeProcess, token: str) -> int:
    return int(
        httpx.post(f"{bridge.url}/get_counter_value", json={}, headers={HEADER: token}).json()["count"]
    )


async def test_every_token_refusal_has_its_own_reason_and_never_reaches_the_upstream(
    counter_bridge: BridgeProcess,
) -> None:
    seed = counter_bridge.seed(counter_row(100))
    token = seed["mcp"]["headers"][HEADER]
    other = counter_bridge.seed(counter_row(500))["mcp"]["headers"][HEADER]
    now = int(time.time())
    cases = {
        "missing": (None, "missing session token"),
        "tampered": (tamper(token), "signature is invalid"),
        "wrong key": (forged(token, key="another-secret-0123456789abcdef-xyz"), "signature is invalid"),
        "expired": (forged(token, exp=now - 5, iat=now - 100, nbf=now - 100), "session token expired"),
        "not yet valid": (forged(token, nbf=now + 600, iat=now + 600), "not valid yet"),
        "other replica": (
            forged(token, iss="http://replica-b:8000"),
            "issued by another replica (http://replica-b:8000)",
        ),
        "other server": (forged(token, aud="some_other_env"), "is for server 'some_other_env'"),
        "allow-list": (forged(token, tools=["get_counter_value"]), "not in this session's allow-list"),
        "garbage": ("not-a-jwt", "malformed"),
    }
    for name, (bad, reason) in cases.items():
        async with mcp_client(f"{counter_bridge.url}/mcp", bad) as client:
            result = await client.call_tool("increment_counter", {"count": 1})
        assert result.is_error, name
        assert reason in result.content[0].text, (name, result.content[0].text)  # type: ignore[union-attr]
        rest = httpx.post(
            f"{counter_bridge.url}/increment_counter", json={"count": 1}, headers={HEADER: bad} if bad else {}
        )
        if bad is not None:
            assert rest.status_code in (401, 403) and reason in rest.json()["detail"], (name, rest.text)
    assert counter(counter_bridge, token) == 100, "a refused call reached the upstream"
    assert counter(counter_bridge, other) == 500


async def test_closed_session_token_is_revoked(counter_bridge: BridgeProcess) -> None:
    token = counter_bridge.seed(counter_row(1))["mcp"]["headers"][HEADER]
    closed = httpx.post(f"{counter_bridge.url}/close_session", json={}, headers={HEADER: token})
    assert closed.status_code == 200 and closed.json()["closed"] is True
    async with mcp_client(f"{counter_bridge.url}/mcp", token) as client:
        result = await client.call_tool("get_counter_value", {})
    assert result.is_error and "closed by /close_session" in result.content[0].text  # type: ignore[union-attr]
    again = httpx.post(f"{counter_bridge.url}/verify", json={}, headers={HEADER: token})
    assert again.status_code == 409 and "closed by /close_session" in again.json()["detail"]


async def test_session_allow_list_comes_from_the_row(counter_bridge: BridgeProcess) -> None:
    row = counter_row(3)
    row["responses_create_params"] = {
        **row["responses_create_params"],
        "tools": [t for t in row["responses_create_params"]["tools"] if t["name"] == "get_counter_value"],
    }
    token = counter_bridge.seed(row)["mcp"]["headers"][HEADER]
    async with mcp_client(f"{counter_bridge.url}/mcp", token) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["get_counter_value"]
        refused = await client.call_tool("increment_counter", {"count": 1})
    assert (
        refused.is_error and "not in this session's allow-list (get_counter_value)" in refused.content[0].text
    )  # type: ignore[union-attr]
    assert counter(counter_bridge, token) == 3


def test_session_cap_answers_503_with_retry_after_and_keeps_existing_sessions(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    bridge: BridgeProcess = spawn_bridge(["--max-sessions", "2"])
    tokens = [bridge.seed(counter_row(i))["mcp"]["headers"][HEADER] for i in (7, 8)]
    refused = httpx.post(f"{bridge.url}/seed_session", json=counter_row(9))
    assert refused.status_code == 503
    assert refused.headers["retry-after"].isdigit()
    assert "session cap reached (2 unfinished sessions)" in refused.json()["detail"]
    assert [counter(bridge, t) for t in tokens] == [7, 8]
    httpx.post(f"{bridge.url}/close_session", json={}, headers={HEADER: tokens[0]})
    assert httpx.post(f"{bridge.url}/seed_session", json=counter_row(9)).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "reason"),
    [
        ("POST", "/seed_session", {"content": b"{not json"}, 400, "malformed JSON body"),
        ("POST", "/seed_session", {"content": b"[1, 2]"}, 400, "must be a JSON object, got list"),
        ("POST", "/increment_counter", {"content": b"x" * (5 * 1024 * 1024)}, 413, "request body too large"),
        ("GET", "/nope", {}, 405, "method GET not allowed on /nope"),
        ("GET", "/a/b/c", {}, 404, "no route GET /a/b/c"),
        ("GET", "/seed_session", {}, 405, "method GET not allowed on /seed_session"),
        ("POST", "/no_such_tool", {"json": {}}, 404, "unknown route /no_such_tool"),
        ("POST", "/a/b", {"json": {}}, 404, "no route POST /a/b"),
    ],
)
def test_bad_input_gets_a_4xx_with_one_line(
    counter_bridge: BridgeProcess,
    method: str,
    path: str,
    kwargs: dict,
    status: int,
    reason: str,  # type: ignore[type-arg]
) -> None:
    response = httpx.request(method, f"{counter_bridge.url}{path}", timeout=30, **kwargs)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert reason in detail and "\n" not in detail and "Traceback" not in response.text


def test_upstream_validation_errors_pass_through_unchanged(counter_bridge: BridgeProcess) -> None:
    response = httpx.post(
        f"{counter_bridge.url}/seed_session", json={"responses_create_params": {"input": []}}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "initial_count"]  # FastAPI's own body, as sent


async def test_bad_arguments_get_the_upstreams_own_answer_and_jsonrpc_garbage_never_reaches_it(
    counter_bridge: BridgeProcess,
) -> None:
    # No bridge-side schema check: the model reads Gym's own validation answer, as over plain HTTP.
    token = counter_bridge.seed(counter_row(0))["mcp"]["headers"][HEADER]
    async with mcp_client(f"{counter_bridge.url}/mcp", token) as client:
        bad = await client.call_tool("increment_counter", {"count": "seven"})
        missing = await client.call_tool("increment_counter", {})
    bad_text = bad.content[0].text  # type: ignore[union-attr]
    assert bad.is_error and json.loads(bad_text)["detail"][0]["type"] == "int_parsing"
    assert json.loads(bad_text)["detail"][0]["loc"] == ["body", "count"]
    missing_text = missing.content[0].text  # type: ignore[union-attr]
    assert missing.is_error and json.loads(missing_text)["detail"][0]["type"] == "missing"
    rest = httpx.post(f"{counter_bridge.url}/increment_counter", json={"count": "x"}, headers={HEADER: token})
    assert rest.status_code == 422 and rest.json()["detail"][0]["loc"] == ["body", "count"]  # FastAPI's own
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        HEADER: token,
    }
    for garbage in (
        b"{",
        b"[]",
        b'{"jsonrpc": "2.0"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":7}',
    ):
        response = httpx.post(f"{counter_bridge.url}/mcp", content=garbage, headers=headers)
        assert response.status_code < 500 and "Traceback" not in response.text, (garbage, response.text)
        if response.status_code == 200:
            assert "error" in response.json()
    assert counter(counter_bridge, token) == 0


async def test_workplace_assistant_catch_all_tools_come_from_the_row(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    bridge: BridgeProcess = spawn_bridge(["--resources-server", "workplace_assistant"])
    row = gym_data("workplace_assistant")[0]
    seed = bridge.seed(row)
    token = seed["mcp"]["headers"][HEADER]
    expected = [t["name"] for t in row["responses_create_params"]["tools"]]
    async with mcp_client(seed["mcp"]["url"], token) as client:
        assert [t.name for t in (await client.list_tools()).tools] == expected
        found = await client.call_tool("company_directory_find_email_address", {"name": "carlos"})
        unknown = await client.call_tool("no_such_function", {})
    assert not found.is_error, found
    assert "carlos" in found.content[0].text.lower()  # type: ignore[union-attr]
    assert unknown.is_error and "not in this session's allow-list" in unknown.content[0].text  # type: ignore[union-attr]
    async with mcp_client(seed["mcp"]["url"]) as anonymous:  # no row: the catch-all has no OpenAPI tools
        assert (await anonymous.list_tools()).tools == []


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_metrics_count_calls_refusals_and_sessions(counter_bridge: BridgeProcess) -> None:
    before = httpx.get(f"{counter_bridge.url}/metrics").text
    seed = counter_bridge.seed(counter_row(0))
    async with mcp_client(seed["mcp"]["url"], seed["mcp"]["headers"][HEADER]) as client:
        await client.call_tool("increment_counter", {"count": 1})
        await client.call_tool("increment_counter", {"count": 1})
    async with mcp_client(seed["mcp"]["url"]) as anonymous:
        await anonymous.call_tool("increment_counter", {"count": 1})
    after = httpx.get(f"{counter_bridge.url}/metrics")
    assert after.headers["content-type"].startswith("text/plain")
    calls = {"tool": "increment_counter", "transport": "mcp", "outcome": "ok"}
    assert (
        metric(after.text, "gym_mcp_bridge_tool_calls_total", **calls)
        - metric(before, "gym_mcp_bridge_tool_calls_total", **calls)
        == 2
    )
    assert (
        metric(after.text, "gym_mcp_bridge_rejections_total", reason="missing")
        - metric(before, "gym_mcp_bridge_rejections_total", reason="missing")
        == 1
    )
    assert metric(after.text, "gym_mcp_bridge_sessions_created_total") >= 1
    assert "gym_mcp_bridge_tool_call_seconds_bucket" in after.text


def test_each_rest_answer_sets_its_own_sessions_cookie(counter_bridge: BridgeProcess) -> None:
    """Every REST answer of a session sets the bridge cookie to that session's token, exactly as
    Starlette's ``set_cookie`` renders it (the bridge renders it once per token); sessions called in
    turn never get each other's, and a client that sends back only the last answer's cookie, as Gym's
    simple_agent does, stays on its own session."""
    seeds = [10, 20, 30]
    tokens = [counter_bridge.seed(counter_row(n))["mcp"]["headers"][HEADER] for n in seeds]
    expected = []
    for token in tokens:
        claims = claims_of(token)
        rendered = Response()
        rendered.set_cookie(
            "gym_mcp_bridge_session",
            token,
            max_age=claims["exp"] - claims["iat"],
            httponly=True,
            samesite="lax",
        )
        expected.append(rendered.headers["set-cookie"])
    kept: list[str] = [""] * len(tokens)
    for turn in range(3):
        for i, token in enumerate(tokens):
            headers = {HEADER: token} if turn == 0 else {"cookie": kept[i]}
            answer = httpx.post(
                f"{counter_bridge.url}/increment_counter", json={"count": i + 1}, headers=headers
            )
            assert answer.status_code == 200, answer.text
            ours = [
                c for c in answer.headers.get_list("set-cookie") if c.startswith("gym_mcp_bridge_session=")
            ]
            assert ours == [expected[i]], (turn, i)
            kept[i] = ours[0].split(";", 1)[0]
    for i, token in enumerate(tokens):
        assert counter(counter_bridge, token) == seeds[i] + 3 * (i + 1)
