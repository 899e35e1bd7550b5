"""OpenAI Chat Completions messages -> a Responses object (as Gym's ``ResponsesConverter`` maps them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bridge.scoring.trajectory.items import (
    DEFAULT_MODEL,
    TrajectoryError,
    append_final_text,
    arguments_text,
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

# Gym's ResponsesConverter extracts paired <think> tags from chat content into a reasoning item.
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def from_openai_chat(
    messages: list[dict[str, Any]],
    final_text: str | None = None,
    model: str = DEFAULT_MODEL,
    *,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Chat Completions messages -> Responses object.

    Assistant text -> ``message``; ``tool_calls`` -> ``function_call`` (``call_id`` = the tool
    call's id); ``role: tool`` -> ``function_call_output`` (``call_id`` = ``tool_call_id``).
    """
    output: list[dict[str, Any]] = []
    for index, message in enumerate(message_list(messages)):
        where = f"messages[{index}]"
        role = checked_role(message, where, ("system", "developer", "user", "assistant", "tool"))
        if role == "assistant":
            output.extend(_chat_assistant_items(message, where))
        elif role == "tool":
            call_id = required_str(message, "tool_call_id", where)
            text = _chat_text(message.get("content"), where, allow_refusal=False)
            output.append(function_call_output_item(call_id, text))
        # system / developer / user: the prompt, or user input mid-rollout; not agent output.
    append_final_text(output, final_text)
    return responses_object(output, model, usage, "openai-chat")


def _chat_assistant_items(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise TrajectoryError(f"{where}: {key} must be a string, got {type_name(value)}")
        if value:
            reasoning.append(value)
            break
    text, refusals = _chat_parts(message.get("content"), where, allow_refusal=True)
    think = _THINK_RE.findall(text)
    if think:
        reasoning.extend(t for t in think if t)
        text = _THINK_RE.sub("", text)
        if not text.strip():
            text = ""
    refusal = message.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        raise TrajectoryError(f"{where}: refusal must be a string, got {type_name(refusal)}")
    refusal = "".join([*refusals, refusal or ""]) if refusals else refusal
    if "function_call" in message and message["function_call"] is not None and not message.get("tool_calls"):
        raise TrajectoryError(f"{where}: legacy function_call is not supported; use tool_calls")

    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        tool_calls = []
    if not isinstance(tool_calls, list):
        raise TrajectoryError(f"{where}: tool_calls must be a list, got {type_name(tool_calls)}")
    calls = [_chat_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(tool_calls)]

    if reasoning:
        items.append(reasoning_item(reasoning))
    if text or refusal or not (reasoning or calls):
        items.append(message_item(text, refusal or None))
    items.extend(calls)
    return items


def _chat_tool_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        raise TrajectoryError(f"{where}: tool call must be an object, got {type_name(call)}")
    call_type = call.get("type", "function")
    if call_type != "function":
        raise TrajectoryError(f"{where}: unsupported tool call type {short_repr(call_type)}; only function")
    call_id = required_str(call, "id", where)
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise TrajectoryError(f"{where}: function must be an object, got {type_name(function)}")
    name = required_str(function, "name", f"{where}.function")
    arguments = arguments_text(function.get("arguments"), f"{where}.function.arguments")
    return function_call_item(call_id, name, arguments)


def _chat_text(content: Any, where: str, *, allow_refusal: bool) -> str:
    """Chat message content (string, list of parts, or null) as one string."""
    return _chat_parts(content, where, allow_refusal=allow_refusal)[0]


def _chat_parts(content: Any, where: str, *, allow_refusal: bool) -> tuple[str, list[str]]:
    """Chat message content (string, list of parts, or null) as (joined text, refusal texts)."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise TrajectoryError(
            f"{where}: content must be a string or a list of parts, got {type_name(content)}"
        )
    texts: list[str] = []
    refusals: list[str] = []
    for i, part in enumerate(content):
        pwhere = f"{where}.content[{i}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            raise TrajectoryError(f"{pwhere}: part must be an object, got {type_name(part)}")
        part_type = part.get("type")
        if part_type in ("text", "output_text", "input_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise TrajectoryError(f"{pwhere}: text must be a string, got {type_name(text)}")
            texts.append(text)
        elif part_type == "refusal" and allow_refusal:
            refusal = part.get("refusal")
            if not isinstance(refusal, str):
                raise TrajectoryError(f"{pwhere}: refusal must be a string, got {type_name(refusal)}")
            refusals.append(refusal)
        else:
            raise TrajectoryError(f"{pwhere}: unsupported content part type {short_repr(part_type)}")
    return "".join(texts), refusals
