"""Anthropic Messages -> a Responses object (as Gym's ``AnthropicConverter`` maps them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bridge.scoring.trajectory.items import (
    DEFAULT_MODEL,
    TrajectoryError,
    append_final_text,
    checked_role,
    function_call_item,
    function_call_output_item,
    message_item,
    message_list,
    reasoning_item,
    required_str,
    responses_object,
    short_repr,
    type_name,
)

# Anthropic server-side (Anthropic-hosted) tools: not Gym tools, nothing to verify, skipped.
_ANTHROPIC_SERVER_TOOL_USE = frozenset({"server_tool_use"})


def from_anthropic(
    messages: list[dict[str, Any]],
    final_text: str | None = None,
    model: str = DEFAULT_MODEL,
    *,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Anthropic Messages -> Responses object.

    Assistant ``text`` -> ``message``, ``thinking`` -> ``reasoning`` (as Gym's
    ``AnthropicConverter`` does), ``tool_use`` / ``mcp_tool_use`` -> ``function_call``; user
    ``tool_result`` / assistant ``mcp_tool_result`` -> ``function_call_output``. Anthropic-hosted
    server tools (``server_tool_use`` and their ``*_tool_result`` blocks) are not Gym tools and
    are skipped.
    """
    output: list[dict[str, Any]] = []
    for index, message in enumerate(message_list(messages)):
        where = f"messages[{index}]"
        role = checked_role(message, where, ("user", "assistant", "system"))
        content = message.get("content")
        if role == "assistant":
            output.extend(_anthropic_assistant_items(content, where))
        elif role == "user" and isinstance(content, list):
            for block_index, block in enumerate(content):
                bwhere = f"{where}.content[{block_index}]"
                if not isinstance(block, Mapping):
                    raise TrajectoryError(
                        f"{bwhere}: content block must be an object, got {type_name(block)}"
                    )
                if block.get("type") == "tool_result":
                    output.append(_anthropic_tool_result(block, bwhere))
                # text, image, document...: user input, not agent output.
        elif role == "user" and content is not None and not isinstance(content, str):
            raise TrajectoryError(f"{where}: content must be a string or a list, got {type_name(content)}")
    append_final_text(output, final_text)
    return responses_object(output, model, usage, "anthropic")


def _anthropic_assistant_items(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        content = ""
    if isinstance(content, str):
        return [message_item(content)]
    if not isinstance(content, list):
        raise TrajectoryError(f"{where}: content must be a string or a list, got {type_name(content)}")

    items: list[dict[str, Any]] = []
    pending_text: list[str] = []

    def flush() -> None:
        if pending_text:
            items.append(message_item("".join(pending_text)))
            pending_text.clear()

    for i, block in enumerate(content):
        bwhere = f"{where}.content[{i}]"
        if not isinstance(block, Mapping):
            raise TrajectoryError(f"{bwhere}: content block must be an object, got {type_name(block)}")
        block_type = block.get("type")
        if block_type == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise TrajectoryError(f"{bwhere}: text must be a string, got {type_name(text)}")
            pending_text.append(text)
        elif block_type == "thinking":
            flush()
            thinking = block.get("thinking", block.get("text"))
            if not isinstance(thinking, str):
                raise TrajectoryError(f"{bwhere}: thinking must be a string, got {type_name(thinking)}")
            signature = block.get("signature")
            items.append(reasoning_item([thinking], signature if isinstance(signature, str) else None))
        elif block_type == "redacted_thinking":
            flush()
            data = block.get("data")
            items.append(reasoning_item([], data if isinstance(data, str) else None))
        elif block_type in ("tool_use", "mcp_tool_use"):
            flush()
            call_id = required_str(block, "id", bwhere)
            name = required_str(block, "name", bwhere)
            tool_input = block.get("input")
            if tool_input is None:
                tool_input = {}
            if not isinstance(tool_input, Mapping):
                raise TrajectoryError(f"{bwhere}: input must be an object, got {type_name(tool_input)}")
            items.append(function_call_item(call_id, name, json.dumps(dict(tool_input))))
        elif block_type == "mcp_tool_result":
            flush()
            items.append(_anthropic_tool_result(block, bwhere))
        elif block_type in _ANTHROPIC_SERVER_TOOL_USE or (
            isinstance(block_type, str) and block_type.endswith("_tool_result")
        ):
            continue  # Anthropic-hosted tool (web search, code execution...): not a Gym tool.
        else:
            raise TrajectoryError(
                f"{bwhere}: unsupported assistant content block type {short_repr(block_type)}"
            )
    flush()
    if not items:
        items.append(message_item(""))
    return items


def _anthropic_tool_result(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    call_id = required_str(block, "tool_use_id", where)
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise TrajectoryError(f"{where}: is_error must be a boolean, got {type_name(is_error)}")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise TrajectoryError(f"{where}.content[{i}]: must be an object, got {type_name(part)}")
            if part.get("type") == "text":
                part_text = part.get("text")
                if not isinstance(part_text, str):
                    raise TrajectoryError(f"{where}.content[{i}]: text must be a string")
                texts.append(part_text)
            # image / document / search_result parts carry nothing a text verifier reads.
        text = "\n".join(texts)
    else:
        raise TrajectoryError(f"{where}: content must be a string or a list, got {type_name(content)}")
    return function_call_output_item(call_id, text)
