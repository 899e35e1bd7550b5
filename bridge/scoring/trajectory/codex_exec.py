"""``codex exec --json`` events -> a Responses object."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from bridge.scoring.trajectory.items import (
    DEFAULT_MODEL,
    TrajectoryError,
    append_final_text,
    arguments_text,
    function_call_item,
    function_call_output_item,
    message_item,
    reasoning_item,
    required_str,
    responses_object,
    type_name,
)


def from_codex_exec(
    events: list[dict[str, Any]],
    final_text: str | None = None,
    model: str = DEFAULT_MODEL,
    *,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``codex exec --json`` events (one JSON object per line, in order) as a Responses object.

    Completed items: ``agent_message`` → assistant message; ``reasoning`` → reasoning;
    ``mcp_tool_call`` → ``function_call`` named as current Codex shows MCP tools to the model
    (``namespace: "mcp__<server>"``, ``name: "<tool>"``) plus its output (the error text when the
    call failed); ``command_execution`` → an ``exec_command`` call and its output. The last
    ``turn.completed`` usage is used unless ``usage`` is given."""
    if not isinstance(events, list):
        raise TrajectoryError(f"codex-exec messages must be a list of events, got {type_name(events)}")
    output: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        where = f"messages[{index}]"
        if not isinstance(event, Mapping):
            raise TrajectoryError(f"{where} must be an object, got {type_name(event)}")
        if (
            event.get("type") == "turn.completed"
            and isinstance(event.get("usage"), Mapping)
            and usage is None
        ):
            turn = event["usage"]
            usage = {
                "input_tokens": turn.get("input_tokens", 0),
                "output_tokens": turn.get("output_tokens", 0),
                "input_tokens_details": {"cached_tokens": turn.get("cached_input_tokens", 0)},
                "output_tokens_details": {"reasoning_tokens": turn.get("reasoning_output_tokens", 0)},
            }
        item = event.get("item")
        if event.get("type") != "item.completed" or not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "agent_message":
            output.append(message_item(str(item.get("text") or "")))
        elif kind == "reasoning" and item.get("text"):
            output.append(reasoning_item([str(item["text"])]))
        elif kind == "mcp_tool_call":
            call_id = f"call_{item.get('id') or uuid.uuid4().hex}"
            call = function_call_item(
                call_id,
                required_str(item, "tool", f"{where}.item"),
                arguments_text(item.get("arguments"), f"{where}.item.arguments"),
            )
            call["namespace"] = f"mcp__{required_str(item, 'server', f'{where}.item')}"
            output += [call, function_call_output_item(call_id, _codex_result_text(item))]
        elif kind == "command_execution":
            call_id = f"call_{item.get('id') or uuid.uuid4().hex}"
            command = json.dumps({"cmd": item.get("command") or ""})
            output += [
                function_call_item(call_id, "exec_command", command),
                function_call_output_item(call_id, str(item.get("aggregated_output") or "")),
            ]
    append_final_text(output, final_text)
    return responses_object(output, model, usage, "codex-exec")


def _codex_result_text(item: Mapping[str, Any]) -> str:
    error = item.get("error")
    if error:
        return f"error: {error.get('message') if isinstance(error, Mapping) else error}"
    result = item.get("result")
    if isinstance(result, Mapping):
        texts = [
            c.get("text", "")
            for c in result.get("content") or []
            if isinstance(c, Mapping) and c.get("type") == "text"
        ]
        return "".join(texts) if texts else json.dumps(result.get("structured_content"))
    return "" if result is None else str(result)
