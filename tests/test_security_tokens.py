"""Hostile session tokens: every one refused, on MCP and on REST, and none reaching the upstream.

The target is a managed bridge on the fault fixture server, which counts every request it gets
(``GET /_fixture/requests``): each case asserts the upstream's POST count did not move.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import HEADER, SECRET, BridgeProcess, counter_row, mcp_client, upstream_url
from tests.fixtures.helpers import (
    OTHER_KEY,
    ROTATED_KEY,
    claims_of,
    external_bridge,
    forge,
    metric,
    seed,
    shared_fault_bridge,
    text_of,
    upstream_posts,
)

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")]


@pytest.fixture(scope="module")
def target(log_dir: Path) -> BridgeProcess:
    return shared_fault_bridge(log_dir)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hand_signed(header: dict[str, Any], claims: dict[str, Any], key: str = SECRET) -> str:
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(key.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def tampered(token: str) -> str:
    """Same signature, payload changed to allow every tool (privilege escalation attempt)."""
    head, _, signature = token.split(".")
    claims = claims_of(token)
    claims["tools"] = [*claims["tools"], "slow_tool", "fail_500"]
    return f"{head}.{_b64(json.dumps(claims).encode())}.{signature}"


def _shifted(token: str, **changes: Any) -> dict[str, Any]:
    return {**claims_of(token), **changes}


CASES: dict[str, tuple[Callable[[str], str], str]] = {
    "tampered payload": (tampered, "signature is invalid"),
    "wrong key": (lambda t: forge(claims_of(t), key=OTHER_KEY), "signature is invalid"),
    "alg none": (lambda t: jwt_none(claims_of(t)), "algorithm 'none' is not accepted"),
    "HS/RS confusion (RS256 header, HMAC signature)": (
        lambda t: _hand_signed({"alg": "RS256", "typ": "JWT"}, claims_of(t)),
        "algorithm 'RS256' is not accepted",
    ),
    "HS512 with the right key": (
        lambda t: forge(claims_of(t), algorithm="HS512"),
        "algorithm 'HS512' is not accepted",
    ),
    "expired": (
        lambda t: forge(
            _shifted(t, iat=int(time.time()) - 7200, nbf=int(time.time()) - 7200, exp=int(time.time()) - 10)
        ),
        "expired",
    ),
    "not yet valid": (
        lambda t: forge(
            _shifted(t, iat=int(time.time()) + 3600, nbf=int(time.time()) + 3600, exp=int(time.time()) + 7200)
        ),
        "not valid yet",
    ),
    "oversized": (lambda t: forge(_shifted(t, pad="x" * 9000)), "too large"),
    "not a JWT": (lambda t: "definitely-not-a-token", "malformed"),
    "header PyJWT refuses (numeric kid)": (
        lambda t: _hand_signed({"alg": "HS256", "typ": "JWT", "kid": 1}, claims_of(t)),
        "malformed",
    ),
    "unknown session id": (lambda t: forge(_shifted(t, sid="0" * 32)), "unknown session"),
}


def jwt_none(claims: dict[str, Any]) -> str:
    return f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT'}).encode())}.{_b64(json.dumps(claims).encode())}."


async def assert_refused_everywhere(
    bridge: BridgeProcess,
    token: str | None,
    reason: str,
    tool: str = "increment_counter",
    check_verify: bool = True,
) -> None:
    """Refused over MCP (isError), on REST tool and verify routes (4xx), the upstream untouched."""
    upstream = upstream_url(bridge)
    before = upstream_posts(upstream)
    rejections = metric(bridge, "gym_mcp_bridge_rejections_total")
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        result = await client.call_tool(tool, {"count": 1})
    assert result.is_error and reason in text_of(result), text_of(result)
    headers = {HEADER: token} if token is not None else {}
    if token is not None:
        rest = httpx.post(f"{bridge.url}/{tool}", json={"count": 1}, headers=headers, timeout=10)
        assert 400 <= rest.status_code < 500 and reason in rest.json()["detail"], rest.text
    if token is not None and check_verify:
        verify = httpx.post(
            f"{bridge.url}/verify",
            json={"response": {"output": []}, "expected_count": 1},
            headers=headers,
            timeout=10,
        )
        assert 400 <= verify.status_code < 500 and reason in verify.json()["detail"], verify.text
    assert upstream_posts(upstream) == before, "a refused request reached the upstream"
    assert metric(bridge, "gym_mcp_bridge_rejections_total") > rejections


@pytest.mark.parametrize("case", list(CASES))
async def test_hostile_token_refused_without_reaching_upstream(target: BridgeProcess, case: str) -> None:
    make, reason = CASES[case]
    valid = seed(target, counter_row(0))
    await assert_refused_everywhere(target, make(valid), reason)
    # and the genuine token still works (the refusal was about the forgery, not the session)
    async with mcp_client(f"{target.url}/mcp", valid) as client:
        assert not (await client.call_tool("increment_counter", {"count": 1})).is_error


async def test_missing_token_refused_for_every_tool_call(target: BridgeProcess) -> None:
    await assert_refused_everywhere(target, None, "missing session token")


async def test_allow_list_violation_refused(target: BridgeProcess) -> None:
    token = seed(target, counter_row(0))  # the row's tools: increment_counter, get_counter_value
    assert claims_of(token)["tools"] == ["increment_counter", "get_counter_value"]
    # (its /verify is legitimate: the allow-list is about tools)
    await assert_refused_everywhere(
        target, token, "not in this session's allow-list", tool="slow_tool", check_verify=False
    )


async def test_replay_after_close_session_refused(target: BridgeProcess) -> None:
    token = seed(target, counter_row(0))
    closed = httpx.post(f"{target.url}/close_session", json={}, headers={HEADER: token}, timeout=10)
    assert closed.status_code == 200, closed.text
    await assert_refused_everywhere(target, token, "closed by /close_session")


async def test_token_of_session_a_never_acts_on_session_b(target: BridgeProcess) -> None:
    a, b = seed(target, counter_row(100)), seed(target, counter_row(200))
    async with mcp_client(f"{target.url}/mcp", a) as client:
        await client.call_tool("increment_counter", {"count": 1})
    # B's token with A's session id is a forgery: its signature breaks
    swapped = f"{b.split('.')[0]}.{a.split('.')[1]}.{b.split('.')[2]}"
    await assert_refused_everywhere(target, swapped, "signature is invalid")
    async with mcp_client(f"{target.url}/mcp", b) as client:
        assert (await client.call_tool("get_counter_value", {})).structured_content == {"count": 200}


async def test_genuinely_expired_token_refused(target: BridgeProcess, log_dir: Path) -> None:
    short = external_bridge(log_dir, upstream_url(target), "--session-ttl-s", "1")
    try:
        token = seed(short, counter_row(0))
        time.sleep(2.2)
        await assert_refused_everywhere(short, token, "expired")
    finally:
        short.stop()


async def test_token_from_another_replica_names_the_issuer(target: BridgeProcess, log_dir: Path) -> None:
    replica = "http://replica-b.gym.example:8000"
    other = external_bridge(log_dir, upstream_url(target), "--advertise-url", replica)
    try:
        token = seed(other, counter_row(0))
        assert claims_of(token)["iss"] == replica
        await assert_refused_everywhere(target, token, f"issued by another replica ({replica})")
    finally:
        other.stop()


async def test_key_rotation_old_key_verifies_during_overlap_then_not(
    target: BridgeProcess, log_dir: Path
) -> None:
    upstream = upstream_url(target)
    overlap = external_bridge(log_dir, upstream, GYM_MCP_BRIDGE_SECRET=f"{ROTATED_KEY},{SECRET}")
    after = external_bridge(log_dir, upstream, GYM_MCP_BRIDGE_SECRET=ROTATED_KEY)
    try:
        # during the overlap: the new key signs; a token signed with the old key still verifies
        fresh = seed(overlap, counter_row(10))
        assert forge(claims_of(fresh), key=ROTATED_KEY) == fresh
        old_signed = forge(claims_of(fresh), key=SECRET)
        async with mcp_client(f"{overlap.url}/mcp", old_signed) as client:
            assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
            assert (await client.call_tool("get_counter_value", {})).structured_content == {"count": 11}
        # once the old key is dropped, the same kind of token is refused (and the new one works)
        current = seed(after, counter_row(0))
        await assert_refused_everywhere(after, forge(claims_of(current), key=SECRET), "signature is invalid")
        async with mcp_client(f"{after.url}/mcp", current) as client:
            assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
    finally:
        overlap.stop()
        after.stop()
