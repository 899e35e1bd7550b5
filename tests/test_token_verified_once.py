"""A session token is verified once per ``/mcp`` request: ``McpEndpoint.post`` verifies it (to relay
another replica's session before anything parses the body) and hands the claims, or the refusal, on
to the fast path or to the SDK's handlers, which admit the session without verifying it again.

One in-process bridge on a real Gym counter server (``tests/test_fastpath.py``'s ``harness``);
``TokenSigner.verify`` is counted on a ``tools/call`` the fast path answers, one it declines (the
SDK answers it), a ``tools/list``, and a refused token on each path.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_fastpath import Harness, call, harness  # noqa: F401 - the fixture

pytestmark = pytest.mark.anyio

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def counting(h: Harness) -> list[str]:
    """Every token ``TokenSigner.verify`` is asked about from now on."""
    signer = h.bridge.signer
    assert signer is not None
    seen: list[str] = []
    verify = signer.verify

    def counted(token: str) -> Any:
        seen.append(token)
        return verify(token)

    signer.verify = counted  # type: ignore[method-assign]
    return seen


async def test_a_call_on_the_fast_path_verifies_its_token_once(harness: Harness) -> None:  # noqa: F811
    token = await harness.token()
    seen = counting(harness)
    before = harness.endpoint.fast_calls
    answer = await harness.fast.post(
        "/mcp",
        json=call("increment_counter", {"count": 2}),
        headers={**HEADERS, "x-nemo-gym-session-token": token},
    )
    assert answer.status_code == 200 and answer.json()["result"]["isError"] is False, answer.text
    assert harness.endpoint.fast_calls == before + 1
    assert seen == [token]


@pytest.mark.parametrize("method", ["tools/call", "tools/list"])
async def test_a_request_the_sdk_answers_verifies_its_token_once(harness: Harness, method: str) -> None:  # noqa: F811
    token = await harness.token()
    seen = counting(harness)
    before = harness.endpoint.fast_calls
    message = (
        call("increment_counter", {"count": 2}, meta={"progressToken": 1})  # declined by the fast path
        if method == "tools/call"
        else {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    )
    answer = await harness.fast.post(
        "/mcp", json=message, headers={**HEADERS, "x-nemo-gym-session-token": token}
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    if method == "tools/call":
        assert result["isError"] is False, result
    else:
        assert {t["name"] for t in result["tools"]} >= {"increment_counter", "get_counter_value"}
    assert harness.endpoint.fast_calls == before, "the SDK answered"
    assert seen == [token]


@pytest.mark.parametrize("meta", [None, {"progressToken": 1}], ids=["fast", "sdk"])
async def test_a_refused_token_is_refused_once_with_its_reason(harness: Harness, meta: Any) -> None:  # noqa: F811
    seen = counting(harness)
    refusals = harness.bridge.metrics.rejections.labels("token")
    counted = refusals._value.get()
    answer = await harness.fast.post(
        "/mcp",
        json=call("increment_counter", {"count": 2}, meta=meta),
        headers={**HEADERS, "x-nemo-gym-session-token": "not-a-jwt"},
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == "session token is malformed (not a JWT)"
    assert seen == ["not-a-jwt"]
    assert refusals._value.get() == counted + 1
