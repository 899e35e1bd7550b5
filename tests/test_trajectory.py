"""Tests for bridge.scoring.trajectory: harness transcripts -> Responses objects for Gym's /verify."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.calllog import ToolCallRecord
from bridge.scoring.trajectory import (
    TrajectoryError,
    from_anthropic,
    from_openai_chat,
    from_recorded,
    from_trajectory,
    function_calls,
)

GYM_PYTHON = Path(__file__).resolve().parent.parent / ".gym-env" / "bin" / "python"

SYSTEM = "You are a helpful assistant with a counter tool."
PROMPT = "Add 13 to the counter, then tell me its value."
ANSWER = "The counter is now 13."
# the items of the counter task: two calls, each with its output, then the answer
TWO_CALLS_THEN_ANSWER = [
    "function_call",
    "function_call_output",
    "function_call",
    "function_call_output",
    "message",
]


def _types(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


def _texts(response: dict[str, Any]) -> list[str]:
    return [
        "".join(p["text"] for p in item["content"] if p["type"] == "output_text")
        for item in response["output"]
        if item["type"] == "message"
    ]


def _calls(response: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (i["call_id"], i["name"], i["arguments"]) for i in response["output"] if i["type"] == "function_call"
    ]


def _outputs(response: dict[str, Any]) -> list[tuple[str, str]]:
    return [(i["call_id"], i["output"]) for i in response["output"] if i["type"] == "function_call_output"]


# ---------------------------------------------------------------------------------------------
# Realistic counter-task transcripts
# ---------------------------------------------------------------------------------------------


def chat_messages() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_inc_1",
                    "type": "function",
                    "function": {"name": "increment_counter", "arguments": '{"count":13}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_inc_1", "content": '{"success": true}'},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_get_2",
                    "type": "function",
                    "function": {"name": "get_counter_value", "arguments": "{}"},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_get_2",
            "content": [{"type": "text", "text": '{"count": 13}'}],
        },
        {"role": "assistant", "content": ANSWER},
    ]


def anthropic_messages() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll add 13 first."},
                {"type": "tool_use", "id": "toolu_01A", "name": "increment_counter", "input": {"count": 13}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": '{"success": true}'}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Now read the value back.", "signature": "sig-abc"},
                {"type": "tool_use", "id": "toolu_01B", "name": "get_counter_value", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01B",
                    "content": [{"type": "text", "text": '{"count":'}, {"type": "text", "text": "13}"}],
                    "is_error": False,
                }
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
    ]


def records() -> list[ToolCallRecord]:
    now = time.time()
    return [
        ToolCallRecord(
            call_id="mcp_1",
            emitted_name="mcp__gym__increment_counter",
            canonical_name="increment_counter",
            arguments={"count": 13},
            output='{"success": true}',
            is_error=False,
            started_at=now,
            duration_s=0.01,
        ),
        ToolCallRecord(
            call_id="mcp_2",
            emitted_name="mcp__gym__get_counter_value",
            canonical_name="get_counter_value",
            arguments={},
            output='{"count": 13}',
            is_error=False,
            started_at=now + 1,
            duration_s=0.01,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# openai-chat
# ---------------------------------------------------------------------------------------------


def test_openai_chat_counter_task_items_in_order() -> None:
    response = from_openai_chat(chat_messages())
    assert _types(response) == TWO_CALLS_THEN_ANSWER
    assert _calls(response) == [
        ("call_inc_1", "increment_counter", '{"count":13}'),
        ("call_get_2", "get_counter_value", "{}"),
    ]
    assert _outputs(response) == [("call_inc_1", '{"success": true}'), ("call_get_2", '{"count": 13}')]
    assert _texts(response) == [ANSWER]
    message = response["output"][-1]
    assert message["role"] == "assistant"
    assert message["status"] == "completed"
    assert message["content"] == [{"type": "output_text", "text": ANSWER, "annotations": []}]


def test_top_level_shape_and_id_formats() -> None:
    before = int(time.time())
    response = from_openai_chat(chat_messages(), model="my-policy")
    assert re.fullmatch(r"resp_[0-9a-f]{32}", response["id"])
    assert response["object"] == "response"
    assert response["model"] == "my-policy"
    assert response["status"] == "completed"
    assert isinstance(response["created_at"], int) and before <= response["created_at"] <= int(time.time())
    assert (
        response["tools"] == []
        and response["tool_choice"] == "auto"
        and response["parallel_tool_calls"] is True
    )
    assert response["usage"] is None
    prefixes = {"function_call": "fc", "message": "msg"}
    for item in response["output"]:
        if item["type"] in prefixes:
            assert re.fullmatch(rf"{prefixes[item['type']]}_[0-9a-f]{{32}}", item["id"]), item
        else:
            assert item["id"] is None
    ids = [item["id"] for item in response["output"] if item["id"]]
    assert len(ids) == len(set(ids)) == 3
    assert from_openai_chat(chat_messages())["id"] != response["id"]


def test_openai_chat_text_with_parallel_calls_reasoning_and_parts() -> None:
    messages = [
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "reasoning_content": "Two increments are needed.",
            "content": [{"type": "text", "text": "Adding "}, {"type": "text", "text": "now."}],
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "increment_counter", "arguments": '{"count": 6}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "increment_counter", "arguments": '{"count": 7}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"success": true}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"success": false}'},
        {"role": "user", "content": "And the value?"},  # mid-rollout user turn: input, skipped
        {"role": "assistant", "content": "<think>It should be 13.</think>\n\nIt is 13."},
    ]
    response = from_openai_chat(messages)
    assert _types(response) == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "reasoning",
        "message",
    ]
    assert response["output"][0]["summary"] == [
        {"type": "summary_text", "text": "Two increments are needed."}
    ]
    assert re.fullmatch(r"rs_[0-9a-f]{32}", response["output"][0]["id"])
    assert _texts(response) == ["Adding now.", "\n\nIt is 13."]
    assert response["output"][6]["summary"] == [{"type": "summary_text", "text": "It should be 13."}]
    assert [c[0] for c in _calls(response)] == ["c1", "c2"]
    assert _outputs(response) == [("c1", '{"success": true}'), ("c2", '{"success": false}')]


def test_openai_chat_dict_and_empty_arguments_normalized() -> None:
    messages = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "function": {"name": "increment_counter", "arguments": {"count": 2}}},
                {"id": "b", "type": "function", "function": {"name": "get_counter_value", "arguments": ""}},
            ],
        }
    ]
    assert _calls(from_openai_chat(messages)) == [
        ("a", "increment_counter", '{"count": 2}'),
        ("b", "get_counter_value", "{}"),
    ]


def test_openai_chat_refusal_and_empty_turn() -> None:
    response = from_openai_chat(
        [
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
            {"role": "assistant", "content": ""},
        ]
    )
    assert response["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't help with that."}]
    # An assistant turn that produced nothing is an empty message, as Gym's converter records it.
    assert response["output"][1]["content"] == [{"type": "output_text", "text": "", "annotations": []}]


def test_only_prompt_gives_empty_output() -> None:
    response = from_openai_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}])
    assert response["output"] == []


# ---------------------------------------------------------------------------------------------
# anthropic
# ---------------------------------------------------------------------------------------------


def test_anthropic_counter_task_items_in_order() -> None:
    response = from_anthropic(anthropic_messages())
    assert _types(response) == [
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert _calls(response) == [
        ("toolu_01A", "increment_counter", '{"count": 13}'),
        ("toolu_01B", "get_counter_value", "{}"),
    ]
    assert json.loads(_calls(response)[0][2]) == {"count": 13}
    assert _outputs(response) == [("toolu_01A", '{"success": true}'), ("toolu_01B", '{"count":\n13}')]
    assert _texts(response) == ["I'll add 13 first.", ANSWER]
    reasoning = response["output"][3]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Now read the value back."}]
    assert reasoning["encrypted_content"] == "sig-abc"


def test_anthropic_text_blocks_merge_and_mcp_and_server_tools() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me "},
                {"type": "text", "text": "check."},
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {"query": "x"},
                },
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {
                    "type": "mcp_tool_use",
                    "id": "mcptoolu_1",
                    "name": "get_counter_value",
                    "server_name": "gym",
                    "input": {},
                },
                {
                    "type": "mcp_tool_result",
                    "tool_use_id": "mcptoolu_1",
                    "is_error": False,
                    "content": [{"type": "text", "text": '{"count": 0}'}],
                },
                {"type": "text", "text": "It is 0."},
            ],
        },
    ]
    response = from_anthropic(messages)
    assert _types(response) == ["reasoning", "message", "function_call", "function_call_output", "message"]
    assert response["output"][0]["summary"] == [] and response["output"][0]["encrypted_content"] == "opaque"
    assert _texts(response) == ["Let me check.", "It is 0."]
    assert _calls(response) == [("mcptoolu_1", "get_counter_value", "{}")]
    assert _outputs(response) == [("mcptoolu_1", '{"count": 0}')]


def test_anthropic_error_tool_result_keeps_text() -> None:
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "increment_counter", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": True,
                    "content": "count: field required",
                },
                {"type": "text", "text": "please retry"},
            ],
        },
        {"role": "assistant", "content": "Sorry."},
    ]
    response = from_anthropic(messages)
    assert _types(response) == ["function_call", "function_call_output", "message"]
    assert _outputs(response) == [("t1", "count: field required")]
    assert _texts(response) == ["Sorry."]


# ---------------------------------------------------------------------------------------------
# recorded
# ---------------------------------------------------------------------------------------------


def test_recorded_calls_then_final_text() -> None:
    response = from_recorded(records(), final_text=ANSWER)
    assert _types(response) == TWO_CALLS_THEN_ANSWER
    assert _calls(response) == [
        ("mcp_1", "mcp__gym__increment_counter", '{"count": 13}'),
        ("mcp_2", "mcp__gym__get_counter_value", "{}"),
    ]
    assert _outputs(response) == [("mcp_1", '{"success": true}'), ("mcp_2", '{"count": 13}')]
    assert _texts(response) == [ANSWER]


def test_recorded_without_final_text_has_no_message() -> None:
    assert _types(from_recorded(records())) == ["function_call", "function_call_output"] * 2
    assert from_recorded([], final_text="")["output"] == []


# ---------------------------------------------------------------------------------------------
# final_text
# ---------------------------------------------------------------------------------------------


def test_final_text_appended_when_different() -> None:
    response = from_openai_chat(chat_messages(), final_text="Final: 13")
    assert _texts(response) == [ANSWER, "Final: 13"]
    assert response["output"][-1]["type"] == "message"
    response = from_anthropic(anthropic_messages(), final_text="Final: 13")
    assert _texts(response)[-1] == "Final: 13" and len(_texts(response)) == 3


def test_final_text_not_duplicated_when_last_output_is_same() -> None:
    assert _texts(from_openai_chat(chat_messages(), final_text=ANSWER)) == [ANSWER]
    assert _texts(from_openai_chat(chat_messages(), final_text=f"  {ANSWER}\n")) == [ANSWER]
    assert _texts(from_anthropic(anthropic_messages(), final_text=ANSWER)) == ["I'll add 13 first.", ANSWER]


def test_final_text_after_tool_output_is_appended() -> None:
    messages = chat_messages()[:-1]  # transcript ends on a tool result
    response = from_openai_chat(messages, final_text=ANSWER)
    assert _types(response)[-2:] == ["function_call_output", "message"]
    assert _texts(response) == [ANSWER]


# ---------------------------------------------------------------------------------------------
# from_trajectory: dispatch, model, usage
# ---------------------------------------------------------------------------------------------


def test_from_trajectory_dispatches_each_format() -> None:
    chat = from_trajectory({"format": "openai-chat", "messages": chat_messages()}, records())
    assert [c[0] for c in _calls(chat)] == ["call_inc_1", "call_get_2"]
    anth = from_trajectory({"format": "anthropic", "messages": anthropic_messages()}, records())
    assert [c[0] for c in _calls(anth)] == ["toolu_01A", "toolu_01B"]
    rec = from_trajectory({"format": "recorded", "final_text": ANSWER, "model": "claude-x"}, records())
    assert [c[0] for c in _calls(rec)] == ["mcp_1", "mcp_2"]
    assert _texts(rec) == [ANSWER]
    assert rec["model"] == "claude-x"
    assert chat["model"] == "gym-mcp-bridge"
    assert [r["metadata"]["trajectory_format"] for r in (chat, anth, rec)] == [
        "openai-chat",
        "anthropic",
        "recorded",
    ]


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {
                "prompt_tokens": 120,
                "completion_tokens": 30,
                "total_tokens": 150,
                "prompt_tokens_details": {"cached_tokens": 64},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
            (120, 30, 150, 64, 5),
        ),
        # Anthropic: input_tokens excludes cache reads/creations; Responses' input_tokens includes them.
        (
            {
                "input_tokens": 12,
                "output_tokens": 40,
                "cache_read_input_tokens": 900,
                "cache_creation_input_tokens": 88,
            },
            (1000, 40, 1040, 900, 0),
        ),
        (
            {
                "input_tokens": 128,
                "output_tokens": 27,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 3},
            },
            (128, 27, 155, 0, 3),
        ),
        ({"input_tokens": 0, "output_tokens": 0}, (0, 0, 0, 0, 0)),
    ],
)
def test_usage_converted_to_responses_shape(usage: dict[str, Any], expected: tuple[int, ...]) -> None:
    response = from_trajectory({"format": "openai-chat", "messages": chat_messages(), "usage": usage}, [])
    u = response["usage"]
    assert (
        u["input_tokens"],
        u["output_tokens"],
        u["total_tokens"],
        u["input_tokens_details"]["cached_tokens"],
        u["output_tokens_details"]["reasoning_tokens"],
    ) == expected


def test_usage_absent_is_null() -> None:
    assert from_trajectory({"format": "anthropic", "messages": []}, [])["usage"] is None
    assert from_trajectory({"format": "recorded", "usage": None}, [])["usage"] is None


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def _chat_call(arguments: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ],
        },
    ]


@pytest.mark.parametrize(
    ("trajectory", "fragment"),
    [
        ("not a mapping", "trajectory must be an object"),
        ({"format": "openai-chat", "messages": {"role": "user"}}, "messages must be a list, got object"),
        ({"format": "langchain", "messages": []}, "trajectory.format must be one of"),
        ({"messages": []}, "trajectory.format must be one of"),
        ({"format": "openai-chat"}, "trajectory.messages is required"),
        ({"format": "recorded", "finalText": "x"}, "unknown key(s) finalText"),
        ({"format": "recorded", "final_text": 3}, "final_text must be a string"),
        ({"format": "recorded", "model": ""}, "trajectory.model must be a non-empty string"),
        (
            {"format": "openai-chat", "messages": _chat_call(7)},
            "arguments must be a JSON string, got integer",
        ),
        (
            {
                "format": "openai-chat",
                "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}],
            },
            "messages[0].tool_calls[0]: missing id",
        ),
        (
            {
                "format": "openai-chat",
                "messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "1"}],
            },
            "messages[1]: missing tool_call_id",
        ),
        (
            {"format": "openai-chat", "messages": [{"role": "function", "content": "1"}]},
            "messages[0]: role must be one of",
        ),
        (
            {"format": "openai-chat", "messages": ["hello"]},
            "messages[0]: message must be an object, got string",
        ),
        (
            {
                "format": "openai-chat",
                "messages": [{"role": "assistant", "content": [{"type": "image_url"}]}],
            },
            "messages[0].content[0]: unsupported content part type 'image_url'",
        ),
        (
            {
                "format": "openai-chat",
                "messages": [{"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}],
            },
            "messages[0]: legacy function_call is not supported",
        ),
        (
            {
                "format": "anthropic",
                "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "1"}]}],
            },
            "messages[0].content[0]: missing tool_use_id",
        ),
        (
            {
                "format": "anthropic",
                "messages": [
                    {"role": "user", "content": "go"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "[1]"}],
                    },
                ],
            },
            "messages[1].content[0]: input must be an object, got string",
        ),
        (
            {
                "format": "anthropic",
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}
                ],
            },
            "messages[0].content[0]: missing id",
        ),
        (
            {"format": "anthropic", "messages": [{"role": "assistant", "content": [{"type": "video"}]}]},
            "messages[0].content[0]: unsupported assistant content block type 'video'",
        ),
        (
            {
                "format": "anthropic",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}],
                    }
                ],
            },
            "messages[0].content[0]: is_error must be a boolean",
        ),
        (
            {"format": "anthropic", "messages": [{"role": "tool", "content": "x"}]},
            "messages[0]: role must be one of",
        ),
        ({"format": "recorded", "usage": [1, 2]}, "usage must be an object, got array"),
        ({"format": "recorded", "usage": {"tokens": 3}}, "usage needs input_tokens/output_tokens"),
        (
            {"format": "recorded", "usage": {"input_tokens": -1}},
            "usage.input_tokens must be a non-negative integer",
        ),
        (
            {"format": "recorded", "usage": {"prompt_tokens": True}},
            "usage.prompt_tokens must be a non-negative integer",
        ),
    ],
)
def test_malformed_trajectories_raise_one_line_reason(trajectory: Any, fragment: str) -> None:
    with pytest.raises(TrajectoryError) as info:
        from_trajectory(trajectory, [])
    message = str(info.value)
    assert fragment in message, message
    assert "\n" not in message and message == message.strip()
    assert type(info.value) is TrajectoryError and info.value.args == (message,)


def test_trajectory_error_collapses_multiline_reason() -> None:
    assert str(TrajectoryError("bad\n  thing\thappened")) == "bad thing happened"


def test_recorded_unserializable_arguments_raise() -> None:
    record = records()[0]
    record.arguments = {"when": object()}
    with pytest.raises(TrajectoryError, match=r"recorded\[0\]: arguments are not JSON-serializable"):
        from_recorded([record])


# ---------------------------------------------------------------------------------------------
# function_calls
# ---------------------------------------------------------------------------------------------


def test_function_calls_in_order_and_by_reference() -> None:
    response = from_anthropic(anthropic_messages())
    calls = function_calls(response)
    assert [c["call_id"] for c in calls] == ["toolu_01A", "toolu_01B"]
    assert all(c["type"] == "function_call" for c in calls)
    calls[0]["name"] = "renamed"
    assert _calls(response)[0][1] == "renamed"


def test_function_calls_on_gym_rollout_and_degenerate_input() -> None:
    rollout = {
        "output": [
            {"type": "function_call", "call_id": "x", "name": "a", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "x", "output": "1"},
            "garbage",
            {"type": "function_call", "call_id": "y", "name": "b", "arguments": "{}"},
            {"type": "message", "role": "assistant", "content": []},
        ]
    }
    assert [c["call_id"] for c in function_calls(rollout)] == ["x", "y"]
    assert function_calls({}) == []
    assert function_calls({"output": None}) == []


# ---------------------------------------------------------------------------------------------
# Gym's own model accepts what we build
# ---------------------------------------------------------------------------------------------

_GYM_CHECK = r"""
import json, sys
from nemo_gym.openai_utils import NeMoGymResponse
results = []
for obj in json.load(sys.stdin):
    r = NeMoGymResponse.model_validate(obj)
    results.append({
        "classes": [type(o).__name__ for o in r.output],
        "output_text": r.output_text,
        "input_tokens": r.usage.input_tokens if r.usage else None,
        "names": [o.name for o in r.output if o.type == "function_call"],
    })
print(json.dumps(results))
"""


@pytest.mark.skipif(not GYM_PYTHON.exists(), reason=f"Gym environment not found at {GYM_PYTHON}")
def test_converted_objects_validate_with_gym_model() -> None:
    usage = {"input_tokens": 12, "output_tokens": 40, "cache_read_input_tokens": 88}
    thinking_chat = [
        {"role": "assistant", "content": "<think>hmm</think>Done.", "refusal": None},
        {"role": "assistant", "content": None, "refusal": "no"},
    ]
    objects = [
        from_openai_chat(chat_messages()),
        from_anthropic(anthropic_messages(), final_text="Final: 13", usage=usage),
        from_recorded(records(), final_text=ANSWER),
        from_recorded([]),
        from_openai_chat(thinking_chat),
        from_trajectory(
            {
                "format": "openai-chat",
                "messages": chat_messages(),
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            },
            [],
        ),
    ]
    proc = subprocess.run(
        [str(GYM_PYTHON), "-c", _GYM_CHECK],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(objects)

    fc, fco, msg, rs = (
        "NeMoGymResponseFunctionToolCall",
        "NeMoGymFunctionCallOutput",
        "NeMoGymResponseOutputMessage",
        "NeMoGymResponseReasoningItem",
    )
    assert results[0]["classes"] == [fc, fco, fc, fco, msg]
    assert results[0]["output_text"] == ANSWER
    assert results[0]["input_tokens"] is None
    assert results[1]["classes"] == [msg, fc, fco, rs, fc, fco, msg, msg]
    assert results[1]["output_text"] == "I'll add 13 first." + ANSWER + "Final: 13"
    assert results[1]["input_tokens"] == 100
    assert results[2]["classes"] == [fc, fco, fc, fco, msg]
    assert results[2]["names"] == ["mcp__gym__increment_counter", "mcp__gym__get_counter_value"]
    assert results[3] == {"classes": [], "output_text": "", "input_tokens": None, "names": []}
    assert results[4]["classes"] == [rs, msg, msg]
    assert results[4]["output_text"] == "Done."
    assert results[5]["input_tokens"] == 5


@pytest.mark.parametrize("raw", ["{count: 1", "[1, 2]"])
def test_malformed_argument_strings_are_kept_as_emitted_for_the_scorer(raw: str) -> None:
    """Gym records a model's malformed arguments and scores them; refusing would drop the rollout."""
    response = from_trajectory({"format": "openai-chat", "messages": _chat_call(raw)}, [])
    assert [item["arguments"] for item in function_calls(response)] == [raw]


CODEX_EVENTS: list[dict[str, Any]] = [
    {"type": "thread.started", "thread_id": "t1"},
    {"type": "turn.started"},
    {
        "type": "item.completed",
        "item": {
            "id": "item_0",
            "type": "mcp_tool_call",
            "server": "counter",
            "tool": "increment_counter",
            "arguments": {"count": 2},
            "result": {"content": [{"type": "text", "text": '{"success":true}'}], "structured_content": None},
            "status": "completed",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "item_1",
            "type": "mcp_tool_call",
            "server": "counter",
            "tool": "get_counter_value",
            "arguments": {},
            "error": {"message": "session lost"},
            "status": "failed",
        },
    },
    {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "The count is 5."}},
    {
        "type": "turn.completed",
        "usage": {
            "input_tokens": 900,
            "cached_input_tokens": 100,
            "output_tokens": 40,
            "reasoning_output_tokens": 7,
        },
    },
]


def test_codex_exec_events_become_namespaced_calls_outputs_message_and_usage() -> None:
    response = from_trajectory({"format": "codex-exec", "messages": CODEX_EVENTS}, [])
    calls = function_calls(response)
    assert [(c["namespace"], c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("mcp__counter", "increment_counter", {"count": 2}),
        ("mcp__counter", "get_counter_value", {}),
    ]
    outputs = [i for i in response["output"] if i["type"] == "function_call_output"]
    assert [(o["call_id"], o["output"]) for o in outputs] == [
        ("call_item_0", '{"success":true}'),
        ("call_item_1", "error: session lost"),
    ]
    assert [c["call_id"] for c in calls] == ["call_item_0", "call_item_1"]
    assert response["output"][-1]["content"][0]["text"] == "The count is 5."
    assert response["usage"]["input_tokens"] == 900 and response["usage"]["output_tokens"] == 40
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 100


def test_codex_exec_needs_a_list_of_events() -> None:
    with pytest.raises(TrajectoryError, match="codex-exec messages must be a list of events"):
        from_trajectory({"format": "codex-exec", "messages": {"type": "turn.started"}}, [])
