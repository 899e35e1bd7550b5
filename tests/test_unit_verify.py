"""Unit tests for bridge.scoring.verify, in-process: prepare() (the body made ready for the upstream's
/verify, with and without a session), normalize() (names resolved on evidence only), finish() (the
upstream's answer given back under the caller's names, with the ``_bridge`` report) and
report_header().

Expected values are written out by hand from the published rules: docs/scoring.md (the seeded row
fills in a body with no row fields; a deep copy is scored; names come back by ``call_id``; the
``_bridge`` report's keys; never ran -> ``mask_sample: true``; typed bodies get the report only in the
header), docs/naming.md (``mcp__<srv>__<tool>`` resolves only under a known or proven alias; the
reasons ``unknown server alias``, ``unknown tool``, ``ambiguous: a | b``; an unresolved Codex
namespace item reaches Gym under its flat name ``namespace.rstrip("_") + "__" + name``), docs/security.md
(the header is ASCII JSON cut to counts past 4 KiB) and the module docstring of
bridge/scoring/verify.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bridge.calllog import ToolCallRecord
from bridge.scoring.naming import canonical_arguments
from bridge.scoring.verify import (
    BRIDGE_KEY,
    REPORT_HEADER_LIMIT,
    Prepared,
    SessionView,
    VerifyRefused,
    finish,
    normalize,
    prepare,
    report_header,
)

TOOLS = ("read_file", "search")
ROW: dict[str, Any] = {
    "responses_create_params": {
        "input": "read a",
        "tools": [{"type": "function", "name": "read_file"}, {"type": "function", "name": "search"}],
    },
    "expected": "contents of a",
}
ARGS = '{"path": "a"}'


def fc(name: str, call_id: str, arguments: str = ARGS, namespace: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function_call", "name": name, "call_id": call_id, "arguments": arguments}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def response(*items: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"id": "resp_1", "object": "response", "output": list(items)}
    if usage is not None:
        value["usage"] = usage
    return value


def record(call_id: str, emitted: str, canonical: str, arguments: dict[str, Any]) -> ToolCallRecord:
    return ToolCallRecord(call_id, emitted, canonical, arguments, "contents of a", False, 0.0, 0.0)


def view(
    calls: list[ToolCallRecord] | None = None, dropped: int = 0, incomplete: str | None = None
) -> SessionView:
    calls = calls or []
    return SessionView(copy.deepcopy(ROW), calls, len(calls) + dropped, TOOLS, incomplete)


def names_in(value: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [
        (item["name"], item.get("namespace"))
        for item in value["output"]
        if isinstance(item, dict) and item.get("type") == "function_call"
    ]


def refused(body: dict[str, Any], session: SessionView | None = None) -> VerifyRefused:
    with pytest.raises(VerifyRefused) as info:
        prepare(body, session, {"gym"}, ())
    return info.value


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------


def test_prepare_without_session_resolves_against_the_body_tools_on_a_copy() -> None:
    body = {**ROW, "response": response(fc("mcp__gym__read_file", "c1"))}
    original = copy.deepcopy(body)
    prepared = prepare(body, None, {"gym"}, ("step",))
    assert names_in(prepared.scoring["response"]) == [("read_file", None)]
    assert prepared.response is prepared.scoring["response"]
    assert prepared.names.normalized == {"mcp__gym__read_file": "read_file"}
    assert prepared.recorded_calls == 0 and not prepared.typed
    assert body == original  # the caller's body, names included, is untouched


def test_prepare_without_session_or_body_tools_uses_the_upstream_tools() -> None:
    body = {"response": response(fc("mcp__gym__step", "c1"))}
    assert names_in(prepare(body, None, {"gym"}, ("step",)).scoring["response"]) == [("step", None)]
    unknown = prepare(body, None, {"gym"}, ())
    assert names_in(unknown.scoring["response"]) == [("mcp__gym__step", None)]
    assert unknown.names.unresolved == [{"name": "mcp__gym__step", "reason": "unknown tool"}]


def test_prepare_without_session_reads_chat_style_body_tools_too() -> None:
    # from_row seeds a session from chat-style tools ({"type": "function", "function": {...}}); the
    # same row verified without a session names the same tools (docs/scoring.md step 1)
    body = {
        "responses_create_params": {"tools": [{"type": "function", "function": {"name": "read_file"}}]},
        "response": response(fc("mcp__gym__read_file", "c1")),
    }
    prepared = prepare(body, None, {"gym"}, ())
    assert names_in(prepared.scoring["response"]) == [("read_file", None)]


def test_session_row_fills_in_a_body_with_only_a_response() -> None:
    body = {"response": response(fc("read_file", "c1"))}
    # the session served the call (read_file is also Gemini CLI's own tool: the bare name needs it)
    prepared = prepare(body, view([record("s1", "read_file", "read_file", {"path": "a"})]), (), ())
    assert prepared.scoring == {**ROW, "response": response(fc("read_file", "c1"))}


def test_session_row_does_not_fill_in_a_body_with_row_fields() -> None:
    body = {"expected": "something else", "response": response()}
    prepared = prepare(body, view(), (), ())
    assert prepared.scoring == body


def test_session_row_does_not_fill_in_a_typed_body() -> None:
    body = {"verification_input": {"response": response()}}
    prepared = prepare(body, view(), (), ())
    assert prepared.typed
    assert prepared.scoring == body


def test_body_aliases_are_accepted_and_stripped() -> None:
    body = {
        **ROW,
        "response": response(fc("mcp__myfs__read_file", "c1")),
        BRIDGE_KEY: {"server_aliases": ["myfs"]},
    }
    prepared = prepare(body, None, {"gym"}, ())
    assert BRIDGE_KEY not in prepared.scoring
    assert names_in(prepared.scoring["response"]) == [("read_file", None)]
    assert BRIDGE_KEY in body  # stripped from the copy only


def test_body_aliases_strip_before_the_row_fills_in() -> None:
    body = {"response": response(), BRIDGE_KEY: {"server_aliases": []}}
    assert prepare(body, view(), (), ()).scoring == {**ROW, "response": response()}


@pytest.mark.parametrize(
    "extra",
    [
        "gym",
        ["gym"],
        {"server_aliases": "gym"},
        {"server_aliases": [""]},
        {"server_aliases": ["a" * 129]},
        {"server_aliases": [5]},
        {"server_aliases": None},
    ],
)
def test_malformed_body_aliases_are_refused(extra: Any) -> None:
    exc = refused({**ROW, "response": response(), BRIDGE_KEY: extra})
    assert exc.kind == "verify_body"
    assert "server_aliases" in str(exc)


@pytest.mark.parametrize("extra", [{}, {"server_aliases": []}, {"server_aliases": ["a" * 128, "b"]}])
def test_well_formed_body_aliases_are_accepted(extra: Any) -> None:
    prepare({**ROW, "response": response(), BRIDGE_KEY: extra}, None, (), ())


def test_response_and_trajectory_together_are_refused() -> None:
    exc = refused({"response": response(), "trajectory": {"format": "recorded"}}, view())
    assert exc.kind == "verify_body"
    assert str(exc) == "give either response or trajectory, not both"


def test_recorded_trajectory_without_session_is_refused() -> None:
    exc = refused({"trajectory": {"format": "recorded"}})
    assert exc.kind == "verify_body"
    assert "needs a session" in str(exc)


def test_recorded_trajectory_from_an_incomplete_log_is_refused_with_its_reason() -> None:
    reason = "the session log dropped 1 of 2 calls (#2 read_file: max_calls_logged=1); recorded verify needs the whole log"
    session = view([record("c1", "read_file", "read_file", {"path": "a"})], dropped=1, incomplete=reason)
    exc = refused({"trajectory": {"format": "recorded"}}, session)
    assert exc.kind == "log_incomplete"
    assert str(exc) == reason


def test_incomplete_log_does_not_refuse_a_given_response() -> None:
    session = view([], dropped=1, incomplete="dropped")
    assert prepare({"response": response(message("done"))}, session, (), ()).recorded_calls == 1


def test_recorded_trajectory_is_scored_from_the_log_with_the_alias_it_proves() -> None:
    session = view([record("c1", "mcp__gym__read_file", "read_file", {"path": "a"})])
    prepared = prepare({"trajectory": {"format": "recorded", "final_text": "done"}}, session, (), ())
    assert names_in(prepared.scoring["response"]) == [("read_file", None)]
    assert prepared.names.proven_aliases == ["gym"]
    assert prepared.scoring["expected"] == ROW["expected"]  # the row filled in
    assert prepared.recorded_calls == 1 and not prepared.never_ran


@pytest.mark.parametrize("body", [{**ROW}, {"response": "not an object"}, {"response": None}])
def test_body_without_a_response_is_refused(body: dict[str, Any]) -> None:
    exc = refused(body)
    assert exc.kind == "verify_body"
    assert "needs a 'response'" in str(exc)


def test_invalid_trajectory_is_refused() -> None:
    exc = refused({"trajectory": {"format": "carrier-pigeon"}}, view())
    assert exc.kind == "verify_body"
    assert str(exc).startswith("invalid trajectory: ")


# --------------------------------------------------------------------------------------------
# normalize
# --------------------------------------------------------------------------------------------


def test_flat_harness_name_resolves_only_under_a_known_alias() -> None:
    with_alias = response(fc("mcp__srv__read_file", "c1"))
    report = normalize(with_alias, TOOLS, {"srv"})
    assert names_in(with_alias) == [("read_file", None)]
    assert report.normalized == {"mcp__srv__read_file": "read_file"}
    assert report.conventions == ["claude-code"]
    assert report.emitted_by_call == {"c1": "mcp__srv__read_file"}

    without = response(fc("mcp__srv__read_file", "c1"))
    report = normalize(without, TOOLS, {"gym"})
    assert names_in(without) == [("mcp__srv__read_file", None)]  # left as emitted
    assert report.normalized == {} and report.emitted_by_call == {}
    assert report.unresolved == [{"name": "mcp__srv__read_file", "reason": "unknown server alias"}]


def test_exact_names_are_left_alone_and_not_reported() -> None:
    value = response(fc("read_file", "c1"), fc("search", "c2"))
    # read_file is also Gemini CLI's own tool: its bare name needs the session's call behind it
    # (tests/test_harness_tools.py); search needs nothing
    report = normalize(value, TOOLS, {"gym"}, [("read_file", canonical_arguments(ARGS))])
    assert names_in(value) == [("read_file", None), ("search", None)]
    assert report.normalized == {} and report.unresolved == [] and report.conventions == []


def test_unknown_tool_and_ambiguous_reasons() -> None:
    value = response(fc("mcp__gym__read_files", "c1"), fc("totally_made_up", "c2"), fc("gym-get-x", "c3"))
    report = normalize(value, ("read_file", "get_x", "get-x"), {"gym"})
    assert report.unresolved == [
        {"name": "mcp__gym__read_files", "reason": "unknown tool"},
        {"name": "totally_made_up", "reason": "unknown tool"},
        {"name": "gym-get-x", "reason": "ambiguous: get-x | get_x"},
    ]
    assert names_in(value) == [("mcp__gym__read_files", None), ("totally_made_up", None), ("gym-get-x", None)]


def test_the_same_unresolved_name_is_listed_once() -> None:
    report = normalize(response(fc("nope", "c1"), fc("nope", "c2")), TOOLS, set())
    assert report.unresolved == [{"name": "nope", "reason": "unknown tool"}]


def test_unresolved_codex_namespace_item_reaches_gym_under_its_flat_name() -> None:
    value = response(fc("read_file", "c1", namespace="mcp__filesystem"))
    report = normalize(value, TOOLS, {"gym"})
    assert value["output"][0]["name"] == "mcp__filesystem__read_file"  # not the session's read_file
    assert "namespace" not in value["output"][0]
    assert report.unresolved == [{"name": "mcp__filesystem.read_file", "reason": "unknown server alias"}]
    assert report.emitted_by_call == {"c1": "read_file"}
    assert report.namespaces == {"c1": "mcp__filesystem"}
    assert report.normalized == {}


def test_codex_namespace_with_trailing_underscores_flattens_like_codex() -> None:
    value = response(fc("_read_file", "c1", namespace="mcp__other__"))
    normalize(value, TOOLS, {"gym"})
    assert value["output"][0]["name"] == "mcp__other__read_file"


def test_codex_namespace_item_of_a_known_alias_resolves() -> None:
    value = response(fc("read_file", "c1", namespace="mcp__gym"))
    report = normalize(value, TOOLS, {"gym"})
    assert value["output"][0] == fc("read_file", "c1")
    assert report.normalized == {"mcp__gym.read_file": "read_file"}
    assert report.namespaces == {"c1": "mcp__gym"}


def test_session_log_proves_an_alias_only_for_matching_arguments() -> None:
    served = [("read_file", canonical_arguments({"path": "a"}))]
    proven = response(fc("mcp__myfs__read_file", "c1", '{"path":"a"}'))
    report = normalize(proven, TOOLS, {"gym"}, served)
    assert report.proven_aliases == ["myfs"]
    assert names_in(proven) == [("read_file", None)]

    other_args = response(fc("mcp__myfs__read_file", "c1", '{"path":"b"}'))
    report = normalize(other_args, TOOLS, {"gym"}, served)
    assert report.proven_aliases == []
    assert names_in(other_args) == [("mcp__myfs__read_file", None)]


# --------------------------------------------------------------------------------------------
# finish
# --------------------------------------------------------------------------------------------


def upstream_echo(prepared: Prepared, reverse: bool = False) -> dict[str, Any]:
    """What a Gym /verify answers: the scored body back (names as scored) with a reward."""
    echoed = copy.deepcopy(prepared.scoring)
    if reverse:
        echoed["response"]["output"].reverse()
    return {**echoed, "reward": 1.0}


def mixed_prepared() -> Prepared:
    body = {
        **ROW,
        "response": response(
            fc("mcp__gym__read_file", "c1"),
            fc("mcp__other__search", "c2"),
            fc("read_file", "c3", namespace="mcp__filesystem"),
            fc("search", "c4"),
            message("done"),
        ),
    }
    return prepare(body, None, {"gym"}, ())


def test_finish_restores_names_by_call_id_and_adds_the_report() -> None:
    prepared = mixed_prepared()
    payload, header = finish(prepared, upstream_echo(prepared, reverse=True), None)
    by_call = {
        item["call_id"]: item for item in payload["response"]["output"] if item["type"] == "function_call"
    }
    assert by_call["c1"] == fc("mcp__gym__read_file", "c1")
    assert by_call["c2"] == fc("mcp__other__search", "c2")
    assert by_call["c3"] == fc("read_file", "c3", namespace="mcp__filesystem")
    assert by_call["c4"] == fc("search", "c4")
    assert payload["reward"] == 1.0
    expected_report = {
        "normalized": {"mcp__gym__read_file": "read_file"},
        "unresolved": [
            {"name": "mcp__other__search", "reason": "unknown server alias"},
            {"name": "mcp__filesystem.read_file", "reason": "unknown server alias"},
        ],
        "harness_tools": [],
        "proven_aliases": [],
        "recorded_tool_calls": 0,
        "agent_never_ran": False,
    }
    assert payload[BRIDGE_KEY] == expected_report
    assert "mask_sample" not in payload
    assert json.loads(header) == expected_report


def test_finish_adds_provenance_to_the_body_not_the_header() -> None:
    prepared = mixed_prepared()
    signed = {"calls": ["c1"], "signature": "abc"}
    payload, header = finish(prepared, upstream_echo(prepared), signed)
    assert payload[BRIDGE_KEY]["provenance"] == signed
    assert "provenance" not in json.loads(header)


@pytest.mark.parametrize(
    ("value", "served", "never_ran"),
    [
        (response(), 0, True),
        (response(message("")), 0, True),  # an output item without content
        (response(usage={"input_tokens": 0, "output_tokens": 0}), 0, True),
        (response(usage={"input_tokens": 0, "output_tokens": 7}), 0, True),  # zero input tokens
        (response(message("an answer")), 0, False),
        (response(usage={"input_tokens": 12}), 0, False),
        (response(usage={"prompt_tokens": 12}), 0, False),
        (response(fc("read_file", "c1")), 0, False),
        (response(), 1, False),  # a tool call was served for the session
    ],
)
def test_never_ran_is_masked(value: dict[str, Any], served: int, never_ran: bool) -> None:
    session = view([record(f"c{i}", "read_file", "read_file", {}) for i in range(served)])
    prepared = prepare({"response": value}, session, (), ())
    payload, header = finish(prepared, upstream_echo(prepared), None)
    assert payload[BRIDGE_KEY]["agent_never_ran"] is never_ran
    assert payload[BRIDGE_KEY]["recorded_tool_calls"] == served
    assert json.loads(header)["agent_never_ran"] is never_ran
    if never_ran:
        assert payload["mask_sample"] is True
    else:
        assert "mask_sample" not in payload


def test_typed_body_gets_no_extra_keys_but_names_and_header() -> None:
    body = {"verification_input": {"response": response(fc("mcp__gym__read_file", "c1"))}}
    prepared = prepare(body, view(), {"gym"}, ())
    assert prepared.typed and prepared.never_ran is False
    assert names_in(prepared.scoring["verification_input"]["response"]) == [("read_file", None)]
    answer = {"reward": 0.0, "verification_input": copy.deepcopy(prepared.scoring["verification_input"])}
    payload, header = finish(prepared, answer, {"signature": "abc"})
    assert set(payload) == {"reward", "verification_input"}
    assert names_in(payload["verification_input"]["response"]) == [("mcp__gym__read_file", None)]
    assert json.loads(header)["normalized"] == {"mcp__gym__read_file": "read_file"}


def test_typed_body_that_never_ran_is_not_masked_in_the_body() -> None:
    prepared = prepare({"verification_input": {"response": response()}}, view(), (), ())
    assert prepared.never_ran
    payload, header = finish(prepared, {"reward": 0.0}, None)
    assert payload == {"reward": 0.0}
    assert json.loads(header)["agent_never_ran"] is True


# --------------------------------------------------------------------------------------------
# report_header
# --------------------------------------------------------------------------------------------


def report(unresolved: list[str], normalized: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "normalized": normalized or {},
        "unresolved": [{"name": name, "reason": "unknown tool"} for name in unresolved],
        "proven_aliases": [],
        "recorded_tool_calls": 7,
        "agent_never_ran": False,
    }


def test_header_is_ascii_for_any_name() -> None:
    value = report(
        ["読み取り", "ünïcödé", "emoji_🙂", "ctl\r\nX-Evil: 1"], {"mcp__сервер__read_file": "read_file"}
    )
    header = report_header(value)
    assert header.isascii()
    assert "\r" not in header and "\n" not in header
    header.encode("latin-1")  # a valid header value
    assert json.loads(header) == value


def test_header_is_compact_json_up_to_the_limit() -> None:
    fixed = (
        '{"normalized":{},"unresolved":[{"name":"","reason":"unknown tool"}],'
        '"proven_aliases":[],"recorded_tool_calls":7,"agent_never_ran":false}'
    )
    name = "n" * (REPORT_HEADER_LIMIT - len(fixed))
    expected = fixed.replace('"name":""', f'"name":"{name}"')
    assert len(expected) == REPORT_HEADER_LIMIT
    assert report_header(report([name])) == expected


def test_header_past_the_limit_carries_counts_only() -> None:
    fixed_len = len(
        '{"normalized":{},"unresolved":[{"name":"","reason":"unknown tool"}],'
        '"proven_aliases":[],"recorded_tool_calls":7,"agent_never_ran":false}'
    )
    name = "n" * (REPORT_HEADER_LIMIT - fixed_len + 1)
    expected = {
        "normalized": 0,
        "unresolved": 1,
        "recorded_tool_calls": 7,
        "agent_never_ran": False,
        "truncated": True,
    }
    assert json.loads(report_header(report([name]))) == expected


def test_many_non_latin1_names_stay_bounded_and_ascii() -> None:
    names = [f"名前_{i}_" + "字" * 40 for i in range(200)]
    header = report_header(report(names, {"mcp__x__a": "a"}))
    assert len(header.encode()) <= REPORT_HEADER_LIMIT and header.isascii()
    assert json.loads(header) == {
        "normalized": 1,
        "unresolved": 200,
        "recorded_tool_calls": 7,
        "agent_never_ran": False,
        "truncated": True,
    }


# --------------------------------------------------------------------------------------------
# Gym's mcp_tool_call_provenance (Gym PR #2673: {call_id: {server_name, tool_name}} next to
# ``response``): evidence under the rules names follow; with no upstream schema saying it takes the
# key, never forwarded (where it sits and what an upstream takes: tests/test_unit_call_provenance.py)
# --------------------------------------------------------------------------------------------


def with_provenance(*items: dict[str, Any], **claims: tuple[str, str]) -> dict[str, Any]:
    return {
        "response": response(*items),
        "mcp_tool_call_provenance": {
            call_id: {"server_name": server, "tool_name": tool} for call_id, (server, tool) in claims.items()
        },
    }


def test_provenance_is_taken_off_the_body_before_the_upstream_sees_it() -> None:
    prepared = prepare(with_provenance(fc("search", "c1"), c1=("gym", "search")), view(), {"gym"}, ())
    assert "mcp_tool_call_provenance" not in prepared.scoring
    assert prepared.scoring == {**ROW, "response": response(fc("search", "c1"))}  # the row still fills in
    assert prepared.names.provenance == {"given": 1, "confirmed": 1, "forwarded": False}


def test_provenance_under_a_known_alias_names_the_tool_a_name_alone_would_not() -> None:
    # a harness whose names no rule explains (say a future one): the structured record does, when
    # this session served that call
    log = [record("s1", "search", "search", {"path": "a"})]
    body = with_provenance(fc("gymtool_7", "c1"), c1=("gym", "search"))
    prepared = prepare(body, view(log), {"gym"}, ())
    assert names_in(prepared.scoring["response"]) == [("search", None)]
    assert prepared.names.normalized == {"gymtool_7": "search"}
    assert prepared.names.conventions == ["provenance"]
    # no call served: the claim alone credits nothing, even under the seed's own server name
    unserved = prepare(body, view(), {"gym"}, ())
    assert names_in(unserved.scoring["response"]) == [("gymtool_7", None)]
    assert unserved.names.unresolved == [
        {"name": "gymtool_7", "reason": "provenance names gym/search: no call the session served proves it"}
    ]


def test_provenance_naming_another_server_is_never_credited_even_on_a_bare_session_name() -> None:
    # Gym's converters write MCP calls with bare names: ``search`` of a server "web" is not ours
    prepared = prepare(with_provenance(fc("search", "c1"), c1=("web", "search")), view(), {"gym"}, ())
    assert names_in(prepared.scoring["response"]) == [("unscored:search", None)]
    assert prepared.names.unresolved == [
        {"name": "search", "reason": "provenance names server 'web': no known alias, no recorded call"}
    ]
    assert prepared.names.provenance == {"given": 1, "confirmed": 0, "forwarded": False}
    payload, _ = finish(prepared, upstream_echo(prepared), None)
    assert names_in(payload["response"]) == [("search", None)]  # the caller's name comes back


def test_provenance_server_is_proven_by_the_sessions_own_call_as_a_name_would_be() -> None:
    log = [record("s1", "search", "search", {"path": "a"})]
    prepared = prepare(with_provenance(fc("search", "c1"), c1=("my-gym", "search")), view(log), {"gym"}, ())
    assert names_in(prepared.scoring["response"]) == [("search", None)]
    assert prepared.names.proven_aliases == ["my-gym"]
    # another session's log proves nothing: this session served no such call
    other = prepare(with_provenance(fc("search", "c1"), c1=("my-gym", "search")), view(), {"gym"}, ())
    assert names_in(other.scoring["response"]) == [("unscored:search", None)]


@pytest.mark.parametrize(
    ("item", "claim", "reason"),
    [
        (
            fc("mcp__gym__read_file", "c1"),
            ("gym", "search"),
            "provenance names gym/search, the name resolves to read_file",
        ),
        (
            fc("search", "c1"),
            ("gym", "delete_all"),
            "provenance names gym/delete_all: no tool of this session",
        ),
    ],
)
def test_provenance_that_contradicts_the_call_credits_nothing(
    item: dict[str, Any], claim: tuple[str, str], reason: str
) -> None:
    log = [
        record("s1", "search", "search", {"path": "a"}),
        record("s2", "read_file", "read_file", {"path": "a"}),
    ]
    prepared = prepare(with_provenance(item, c1=claim), view(log), {"gym"}, ())
    assert prepared.names.unresolved == [{"name": item["name"], "reason": reason}]
    [(name, _)] = names_in(prepared.scoring["response"])
    assert name not in TOOLS


@pytest.mark.parametrize(
    "value",
    [
        [],
        "gym",
        {"c1": "search"},
        {"c1": {"server_name": "gym"}},
        {"c1": {"server_name": "", "tool_name": "x"}},
    ],
)
def test_malformed_provenance_is_a_400_with_one_line(value: Any) -> None:
    error = refused({"response": response(fc("search", "c1")), "mcp_tool_call_provenance": value})
    assert error.kind == "verify_body" and "\n" not in str(error)
    assert "mcp_tool_call_provenance must be an object" in str(error)


def test_null_provenance_is_no_provenance() -> None:
    prepared = prepare(
        {"response": response(fc("search", "c1")), "mcp_tool_call_provenance": None}, view(), {"gym"}, ()
    )
    assert prepared.names.provenance is None and "mcp_tool_call_provenance" not in prepared.scoring


@pytest.mark.parametrize(
    ("item", "shown"),
    [
        (fc("mcp__filesystem__search", "c1"), "mcp__filesystem__search"),
        (fc("search", "c1", namespace="mcp__filesystem"), "mcp__filesystem.search"),
    ],
)
def test_provenance_cannot_move_another_servers_call_to_ours(item: dict[str, Any], shown: str) -> None:
    # the name says another MCP server's search (no served call proves "filesystem" an alias here)
    prepared = prepare(with_provenance(item, c1=("gym", "search")), view(), {"gym"}, ())
    reason = "provenance names gym/search, the name names another server"
    assert prepared.names.unresolved == [{"name": shown, "reason": reason}]
    [(name, _)] = names_in(prepared.scoring["response"])
    assert name not in TOOLS
