"""Numbers reach Gym and come back exactly as a client wrote them, as they do over plain HTTP.

orjson reads an integer outside ``[-2**63, 2**64)`` as a float; Gym's servers (Starlette's
``json.loads``, pydantic) keep it exact. The oracle here is Gym itself: the same row and the same
calls sent straight to a real Gym counter server (``example_session_state_mgmt``), whose state and
``/verify`` reward the bridge's must equal -- over MCP with the official SDK client, over raw
``POST /mcp`` (the fast path), over the REST surface, and through ``/verify`` with the seeded row.
The unit half checks ``bridge.exactjson`` against the standard library's parser, which is what
Starlette hands a Gym server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import exactjson
from tests.fixtures.bridges import HEADER, UpstreamProcess, counter_row, mcp_client, running_bridge
from tests.fixtures.helpers import gym_response

pytestmark = pytest.mark.anyio

# past 64 bits both ways, 2**64 itself (a float holds it exactly: a float would still pass for it
# in ==), and one with more digits than any float keeps
WIDE = [2**64 + 1, -(2**63) - 1, 2**64, 10**30 + 7]
ACCEPT = "application/json, text/event-stream"


def post_json(
    http: httpx.Client, path: str, value: Any, headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST ``value`` encoded by the standard library (orjson cannot write these integers)."""
    return http.post(
        path, content=json.dumps(value), headers={"content-type": "application/json", **(headers or {})}
    )


def direct(upstream: str, wide: int) -> tuple[Any, Any]:
    """Gym's own answer: seed 0 expecting ``wide``, add ``wide``, read the counter, verify."""
    row = counter_row(0, wide)
    with httpx.Client(base_url=upstream, timeout=60) as http:
        post_json(http, "/seed_session", row).raise_for_status()
        post_json(http, "/increment_counter", {"count": wide}).raise_for_status()
        state = json.loads(post_json(http, "/get_counter_value", {}).content)
        verdict = json.loads(post_json(http, "/verify", {**row, "response": gym_response()}).content)
    return state["count"], verdict["reward"]


def seed(http: httpx.Client, wide: int) -> str:
    answer = post_json(http, "/seed_session", counter_row(0, wide))
    assert answer.status_code == 200, answer.text
    return str(answer.json()["mcp"]["headers"][HEADER])


def verify(http: httpx.Client, token: str) -> Any:
    answer = post_json(http, "/verify", {"response": gym_response()}, {HEADER: token})
    assert answer.status_code == 200, answer.text
    return json.loads(answer.content)["reward"]


@pytest.fixture(scope="module")
def bridged(counter_upstream: UpstreamProcess, log_dir: Path) -> Iterator[tuple[str, str]]:
    """Gym's counter alone and a bridge in external mode in front of it: (upstream URL, bridge URL)."""
    with running_bridge(log_dir, "--upstream-url", counter_upstream.url, timeout=120) as bridge:
        yield counter_upstream.url, bridge.url


@pytest.mark.parametrize("wide", WIDE)
def test_rest_and_the_fast_path_pass_wide_integers_as_gym_reads_them(
    bridged: tuple[str, str], wide: int
) -> None:
    upstream, bridge = bridged
    count, reward = direct(upstream, wide)
    assert type(count) is int and count == wide and reward == 1.0  # Gym's own word

    with httpx.Client(base_url=bridge, timeout=60) as http:  # the REST surface, Gym's contract
        token = seed(http, wide)
        headers = {HEADER: token}
        assert post_json(http, "/increment_counter", {"count": wide}, headers).status_code == 200
        state = json.loads(post_json(http, "/get_counter_value", {}, headers).content)
        assert type(state["count"]) is int and state["count"] == count
        assert verify(http, token) == reward

    with httpx.Client(base_url=bridge, timeout=60) as http:  # POST /mcp as one raw request each
        token = seed(http, wide)
        headers = {HEADER: token, "accept": ACCEPT}
        texts = []
        for request_id, (name, arguments) in enumerate(
            [("increment_counter", {"count": wide}), ("get_counter_value", {})]
        ):
            message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}  # fmt: skip
            result = json.loads(post_json(http, "/mcp", message, headers).content)["result"]
            assert result["isError"] is False, result
            texts.append(result)
        assert json.loads(texts[1]["content"][0]["text"]) == {"count": count}
        assert texts[1]["structuredContent"] == {"count": count}
        assert type(texts[1]["structuredContent"]["count"]) is int
        assert verify(http, token) == reward


async def test_the_mcp_sdk_client_passes_a_wide_integer_as_gym_reads_it(bridged: tuple[str, str]) -> None:
    upstream, bridge = bridged
    wide = WIDE[0]
    count, reward = direct(upstream, wide)
    with httpx.Client(base_url=bridge, timeout=60) as http:
        token = seed(http, wide)
    async with mcp_client(f"{bridge}/mcp", token) as client:
        added = await client.call_tool("increment_counter", {"count": wide})
        assert not added.is_error, added
        read = await client.call_tool("get_counter_value", {})
    assert read.structured_content == {"count": count}
    assert type(read.structured_content["count"]) is int
    with httpx.Client(base_url=bridge, timeout=60) as http:
        assert verify(http, token) == reward


def test_gyms_verify_answer_comes_back_with_the_rows_wide_integer(bridged: tuple[str, str]) -> None:
    """Gym's ``/verify`` answer echoes the row's ``responses_create_params``: the bridge passes that
    answer on (names restored, ``_bridge`` added) with the integer as Gym wrote it."""
    upstream, bridge = bridged
    wide = WIDE[0]
    row = counter_row(0, 0)
    row["responses_create_params"] = {**row["responses_create_params"], "max_output_tokens": wide}
    with httpx.Client(base_url=upstream, timeout=60) as http:
        post_json(http, "/seed_session", row).raise_for_status()
        gym = json.loads(post_json(http, "/verify", {**row, "response": gym_response()}).content)
    echoed = gym["responses_create_params"]["max_output_tokens"]
    assert echoed == wide and type(echoed) is int  # Gym's own answer
    with httpx.Client(base_url=bridge, timeout=60) as http:
        answer = post_json(http, "/seed_session", row)
        assert answer.status_code == 200, answer.text
        token = str(answer.json()["mcp"]["headers"][HEADER])
        answer = post_json(http, "/verify", {"response": gym_response()}, {HEADER: token})
    assert answer.status_code == 200, answer.text
    verdict = json.loads(answer.content)
    assert verdict["responses_create_params"]["max_output_tokens"] == echoed
    assert verdict["reward"] == gym["reward"] == 1.0


async def test_a_rows_tool_schema_keeps_its_wide_integer(bridged: tuple[str, str]) -> None:
    """A row that declares its tools (the session's tools come from the row first) with an integer
    past 64 bits in a schema seeds, and lists that schema as written."""
    _, bridge = bridged
    schema = {"type": "object", "properties": {"count": {"type": "integer", "maximum": 10**30}}}
    row = counter_row(0, 1)
    row["responses_create_params"] = {
        **row["responses_create_params"],
        "tools": [{"type": "function", "name": "increment_counter", "parameters": schema}],
    }
    with httpx.Client(base_url=bridge, timeout=60) as http:
        answer = post_json(http, "/seed_session", row)
        assert answer.status_code == 200, answer.text
        token = str(answer.json()["mcp"]["headers"][HEADER])
    async with mcp_client(f"{bridge}/mcp", token) as client:
        listed = (await client.list_tools()).tools
    assert [tool.name for tool in listed] == ["increment_counter"]
    assert listed[0].input_schema["properties"]["count"]["maximum"] == 10**30


def test_the_recorded_trajectory_names_the_call_as_gym_received_it(bridged: tuple[str, str]) -> None:
    """The session log keeps the arguments as the upstream received them; the ``recorded``
    trajectory built from it reaches Gym's ``/verify``, whose answer echoes it, with the integer
    exact -- and scores as Gym scores the same rollout directly."""
    upstream, bridge = bridged
    wide = WIDE[0]
    with httpx.Client(base_url=bridge, timeout=60) as http:
        token = seed(http, wide)
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "increment_counter", "arguments": {"count": wide}}}  # fmt: skip
        called = post_json(http, "/mcp", message, {HEADER: token, "accept": ACCEPT})
        assert json.loads(called.content)["result"]["isError"] is False, called.text
        answer = post_json(http, "/verify", {"trajectory": {"format": "recorded"}}, {HEADER: token})
    assert answer.status_code == 200, answer.text
    verdict = json.loads(answer.content)
    calls = [item for item in verdict["response"]["output"] if item["type"] == "function_call"]
    assert [json.loads(call["arguments"]) for call in calls] == [{"count": wide}]
    assert type(json.loads(calls[0]["arguments"])["count"]) is int
    assert verdict["reward"] == direct(upstream, wide)[1] == 1.0


def test_a_row_with_a_wide_integer_is_verified_as_seeded(bridged: tuple[str, str]) -> None:
    """The seeded row goes back to Gym's ``/verify`` with its integers as seeded: with one past 64
    bits Gym scores the rollout it would score directly, and a near miss (one less) still scores 0."""
    upstream, bridge = bridged
    wide = WIDE[0]
    rewards = []
    for added in (wide, wide - 1):
        with httpx.Client(base_url=bridge, timeout=60) as http:  # a client each: Gym's cookie is its own
            token = seed(http, wide)
            assert post_json(http, "/increment_counter", {"count": added}, {HEADER: token}).status_code == 200
            rewards.append(verify(http, token))
    assert rewards == [direct(upstream, wide)[1], 0.0] == [1.0, 0.0]


# -- bridge.exactjson against the standard library ------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_exactjson_reads_what_the_standard_library_reads(value: Any) -> None:
    text = json.dumps(value)
    read = exactjson.loads(text)
    assert read == json.loads(text)
    assert repr(read) == repr(json.loads(text))  # an int stays an int, a float a float
    assert exactjson.loads(exactjson.dumps(read)) == read


@pytest.mark.parametrize("wide", [*WIDE, 2**63, 2**64 - 1, -(2**63)])
def test_exactjson_keeps_each_edge_integer(wide: int) -> None:
    text = f'{{"n": {wide}, "f": 1.5}}'
    assert repr(exactjson.loads(text)) == repr({"n": wide, "f": 1.5})
    assert exactjson.dumps({"n": wide}) == f'{{"n":{wide}}}'.encode()
    assert exactjson.dumps({"z": 1, "a": wide}, sort_keys=True) == f'{{"a":{wide},"z":1}}'.encode()


def test_exactjson_refuses_what_it_cannot_read_exactly_as_json_it_cannot_read() -> None:
    # deeper than the standard library's recursion allows, with a wide integer inside: a parse error
    # the callers already turn into a one-line refusal, not a RecursionError (a 500)
    with pytest.raises(exactjson.JSONDecodeError):
        exactjson.loads("[" * 1000 + str(2**64 + 1) + "]" * 1000)
    assert exactjson.loads("[" * 1000 + "1" + "]" * 1000) is not None  # orjson alone reads it
