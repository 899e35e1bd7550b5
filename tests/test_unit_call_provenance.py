"""Unit tests for bridge.scoring.call_provenance: where Gym's ``mcp_tool_call_provenance`` sits in a
verify body, what an upstream's ``/verify`` schema takes, and what of it the upstream gets.

Expected shapes come from Gym: PR #2673 declares the field on the request model that holds
``response`` (``{call_id: {server_name, tool_name}}``, both non-empty with a non-space character);
nemo-gym 0.7.0's ``ResourcesVerifyRequest`` (``episode_id``, ``task_id``, ``verification_input``)
forbids extra keys, and pydantic writes ``extra="forbid"`` as ``"additionalProperties": false`` in
the OpenAPI schema (``extra="ignore"``, the default of 0.7.0's flat ``BaseVerifyRequest``, writes
nothing). The same against a real nemo-gym 0.7.0 server: tests/test_scoring_evidence.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bridge.calllog import ToolCallRecord
from bridge.scoring.call_provenance import (
    BODY,
    KEY,
    TYPED_BODY,
    VERIFICATION_INPUT,
    accepted_places,
    take,
)
from bridge.scoring.verify import SessionView, VerifyRefused, finish, prepare

TOOLS = ("read_file", "search")
ARGS = '{"path": "a"}'


def fc(name: str, call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "call_id": call_id, "arguments": ARGS}


def response(*items: dict[str, Any]) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "output": list(items)}


def claims(**named: tuple[str, str]) -> dict[str, dict[str, str]]:
    return {cid: {"server_name": server, "tool_name": tool} for cid, (server, tool) in named.items()}


def typed(inner: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"episode_id": {"id": "e"}, "task_id": {"id": "t"}, "verification_input": inner, **top}


def view(*served: str) -> SessionView:
    calls = [
        ToolCallRecord(f"s{i}", t, t, {"path": "a"}, "ok", False, 0.0, 0.0) for i, t in enumerate(served)
    ]
    return SessionView({"responses_create_params": {"input": "x"}}, calls, len(calls), TOOLS, None)


# -- where it sits ------------------------------------------------------------------------------


def test_it_is_read_beside_the_response_at_the_top_or_in_verification_input() -> None:
    flat = {"response": response(), KEY: claims(c1=("gym", "search"))}
    sidecar = take(flat)
    assert sidecar is not None and sidecar.place == BODY and sidecar.claims == {"c1": ("gym", "search")}
    assert KEY not in flat

    inner = {"response": response(), KEY: claims(c1=("gym", "search"))}
    body = typed(inner)
    sidecar = take(body)
    assert sidecar is not None and sidecar.place == VERIFICATION_INPUT
    assert KEY not in body["verification_input"] and KEY in inner  # the caller's dict is not changed

    body = typed({"response": response()}, **{KEY: claims(c1=("gym", "search"))})
    sidecar = take(body)
    assert sidecar is not None and sidecar.place == TYPED_BODY and KEY not in body


def test_a_typed_input_without_a_response_keeps_its_own_field() -> None:
    body = typed({"invocations": [], KEY: {"anything": 1}})  # not Gym's sidecar: no response beside it
    assert take(body) is None and body["verification_input"][KEY] == {"anything": 1}


@pytest.mark.parametrize(
    "body",
    [
        typed({"response": response(), KEY: {}}, **{KEY: {}}),
        typed({"response": response(), KEY: claims(c1=("a", "b"))}, **{KEY: claims(c2=("a", "b"))}),
    ],
)
def test_given_twice_is_a_400_with_one_line(body: dict[str, Any]) -> None:
    with pytest.raises(VerifyRefused) as info:
        prepare(body, view(), {"gym"}, ())
    assert "\n" not in str(info.value) and "given twice" in str(info.value)


@pytest.mark.parametrize(
    "entry", [{"server_name": " ", "tool_name": "x"}, {"server_name": "g", "tool_name": 7}]
)
def test_blank_or_non_string_names_are_refused_as_gym_refuses_them(entry: dict[str, Any]) -> None:
    with pytest.raises(VerifyRefused) as info:
        prepare(typed({"response": response(fc("search", "c1")), KEY: {"c1": entry}}), view(), {"gym"}, ())
    assert str(info.value).startswith(f"{KEY} must be an object")


# -- what an upstream takes ---------------------------------------------------------------------


def spec(schema: dict[str, Any], **schemas: dict[str, Any]) -> dict[str, Any]:
    body = {"content": {"application/json": {"schema": schema}}}
    return {"paths": {"/verify": {"post": {"requestBody": body}}}, "components": {"schemas": schemas}}


FLAT = {"type": "object", "properties": {"response": {}, "responses_create_params": {}}}
TYPED_FORBID = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "episode_id": {},
        "task_id": {},
        "verification_input": {"$ref": "#/components/schemas/In"},
    },
}
IN_FORBID = {"type": "object", "additionalProperties": False, "properties": {"response": {}}}
IN_DECLARES = {
    **IN_FORBID,
    "properties": {"response": {}, KEY: {"anyOf": [{"type": "object"}, {"type": "null"}]}},
}


def test_places_follow_the_upstreams_request_models() -> None:
    assert accepted_places(spec({"$ref": "#/components/schemas/F"}, F=FLAT)) == {BODY}
    assert accepted_places(spec({"$ref": "#/components/schemas/T"}, T=TYPED_FORBID, In=IN_FORBID)) == set()
    union = {"anyOf": [{"$ref": "#/components/schemas/F"}, {"$ref": "#/components/schemas/T"}]}
    assert accepted_places(spec(union, F=FLAT, T=TYPED_FORBID, In=IN_DECLARES)) == {BODY, VERIFICATION_INPUT}
    assert accepted_places({"paths": {"/verify": {"post": {}}}}) == set()  # no body model: never sent
    assert accepted_places({"paths": {}}) == set()


def test_a_cyclic_schema_ends() -> None:
    loop = {"$ref": "#/components/schemas/A"}
    assert accepted_places(spec(loop, A={"$ref": "#/components/schemas/A"})) == set()


# -- what the upstream gets ---------------------------------------------------------------------


def test_the_upstream_gets_only_the_claims_this_bridge_credited_and_the_caller_its_own_back() -> None:
    sent = claims(c1=("gym", "search"), c2=("gym", "read_file"), c3=("web", "search"))
    output = [fc("mcp__gym__search", "c1"), fc("hallucinated", "c2"), fc("search", "c3")]
    body = typed({"response": response(*output), KEY: copy.deepcopy(sent)})
    prepared = prepare(body, view(), {"gym"}, (), {VERIFICATION_INPUT})
    forwarded = prepared.scoring["verification_input"][KEY]
    # c1 is confirmed by its own name; c2 names a call the session never served; c3 another server
    assert forwarded == {"c1": {"server_name": "gym", "tool_name": "search"}}
    assert prepared.names.provenance == {"given": 3, "confirmed": 1, "forwarded": True}
    echo = {"reward": 0.0, "verification_input": copy.deepcopy(prepared.scoring["verification_input"])}
    payload, _ = finish(prepared, echo, None)
    assert payload["verification_input"][KEY] == sent


def test_where_the_upstream_would_refuse_it_nothing_is_sent() -> None:
    body = typed({"response": response(fc("search", "c1"))}, **{KEY: claims(c1=("gym", "search"))})
    prepared = prepare(body, view("search"), {"gym"}, (), {BODY, VERIFICATION_INPUT})  # not TYPED_BODY
    assert KEY not in prepared.scoring and KEY not in prepared.scoring["verification_input"]
    assert prepared.names.provenance == {"given": 1, "confirmed": 1, "forwarded": False}
