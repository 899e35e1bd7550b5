"""Trajectory conversion: what a harness produced -> a Responses-API ``response`` for ``/verify``.

Owns: turning a harness transcript (OpenAI Chat Completions messages, Anthropic Messages, Codex's
``exec --json`` events, or the bridge's own log of the tool calls it served) into the OpenAI Responses object that NeMo Gym's
``/verify`` takes as ``response`` (Gym's ``NeMoGymResponse``), and finding the ``function_call``
items in such an object. It does not own scoring, tool-name normalization (the verify layer
renames ``function_call`` names to canonical ones later) or HTTP; it never imports ``nemo_gym``.

Data flow: ``POST /verify`` with ``trajectory: {"format", "messages", "final_text", "usage",
"model"}`` -> ``from_trajectory`` validates the shape and dispatches on ``format`` ->
``from_openai_chat`` / ``from_anthropic`` / ``from_codex_exec`` / ``from_recorded`` build the
``output`` items ->
``_response`` wraps them in the top-level Responses fields. Any malformed input raises
``TrajectoryError`` with a one-line reason naming the offending message index; the route answers
it as a 400.

The mapping follows Gym's own converters (``nemo_gym.responses_converter`` and
``nemo_gym.anthropic_converter``) and the rollouts Gym records:

* Only what the agent produced goes into ``output``: assistant turns and tool results. System,
  developer and user turns are the prompt (or mid-rollout user input) and are skipped.
* An assistant turn becomes, in order: a ``reasoning`` item (chat ``reasoning_content`` /
  ``reasoning`` or ``<think>...</think>`` in the text, Anthropic ``thinking`` blocks), a
  ``message`` item with one ``output_text`` part, and one ``function_call`` item per tool call
  (``arguments`` a JSON-object string). Anthropic blocks keep their own order.
* Tool results become ``function_call_output`` items (``call_id`` + ``output`` string).
* An assistant turn that produced nothing at all becomes an empty assistant message, as Gym's
  Chat Completions converter does.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from bridge.calllog import ToolCallRecord

__all__ = [
    "DEFAULT_MODEL",
    "FORMATS",
    "TrajectoryError",
    "from_anthropic",
    "from_openai_chat",
    "from_recorded",
    "from_trajectory",
    "function_calls",
]

DEFAULT_MODEL = "gym-mcp-bridge"
FORMATS = ("openai-chat", "anthropic", "recorded", "codex-exec")
_TRAJECTORY_KEYS = frozenset({"format", "messages", "final_text", "usage", "model"})

# Gym's ResponsesConverter extracts paired <think> tags from chat content into a reasoning item.
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)

# Anthropic server-side (Anthropic-hosted) tools: not Gym tools, nothing to verify, skipped.
_ANTHROPIC_SERVER_TOOL_USE = frozenset({"server_tool_use"})


class TrajectoryError(ValueError):
    """A trajectory the bridge cannot convert; the message is a one-line reason for a 400."""

    def __init__(self, reason: str) -> None:
        super().__init__(" ".join(str(reason).split()))


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def from_trajectory(trajectory: Mapping[str, Any], recorded: Sequence[ToolCallRecord]) -> dict[str, Any]:
    """Validate a ``/verify`` ``trajectory`` body and convert it to a Responses object.

    ``trajectory`` is ``{"format": "openai-chat" | "anthropic" | "recorded" | "codex-exec", "messages": [...],
    "final_text": str | None, "usage": {...} | None, "model": str | None}``. ``messages`` is
    required for the two transcript formats and ignored for ``recorded``, which is built from
    ``recorded`` (the session's log of served tool calls, in order).
    """
    if not isinstance(trajectory, Mapping):
        raise TrajectoryError(f"trajectory must be an object, got {_type_name(trajectory)}")
    unknown = sorted(str(k) for k in trajectory if k not in _TRAJECTORY_KEYS)
    if unknown:
        raise TrajectoryError(
            f"trajectory has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_TRAJECTORY_KEYS))}"
        )
    fmt = trajectory.get("format")
    if fmt not in FORMATS:
        raise TrajectoryError(f"trajectory.format must be one of {', '.join(FORMATS)}; got {_short(fmt)}")
    final_text = trajectory.get("final_text")
    if final_text is not None and not isinstance(final_text, str):
        raise TrajectoryError(f"trajectory.final_text must be a string, got {_type_name(final_text)}")
    model = trajectory.get("model")
    if model is None:
        model = DEFAULT_MODEL
    elif not isinstance(model, str) or not model:
        raise TrajectoryError(f"trajectory.model must be a non-empty string, got {_short(model)}")
    usage = trajectory.get("usage")

    if fmt == "recorded":
        return from_recorded(recorded, final_text, model, usage=usage)
    if "messages" not in trajectory:
        raise TrajectoryError(f"trajectory.messages is required for format {fmt}")
    messages = trajectory["messages"]
    if fmt == "openai-chat":
        return from_openai_chat(messages, final_text, model, usage=usage)
    if fmt == "codex-exec":
        return from_codex_exec(messages, final_text, model, usage=usage)
    return from_anthropic(messages, final_text, model, usage=usage)


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
        raise TrajectoryError(f"codex-exec messages must be a list of events, got {_type_name(events)}")
    output: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        where = f"messages[{index}]"
        if not isinstance(event, Mapping):
            raise TrajectoryError(f"{where} must be an object, got {_type_name(event)}")
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
            output.append(_message_item(str(item.get("text") or "")))
        elif kind == "reasoning" and item.get("text"):
            output.append(_reasoning_item([str(item["text"])]))
        elif kind == "mcp_tool_call":
            call_id = f"call_{item.get('id') or uuid.uuid4().hex}"
            call = _function_call_item(
                call_id,
                _required_str(item, "tool", f"{where}.item"),
                _arguments(item.get("arguments"), f"{where}.item.arguments"),
            )
            call["namespace"] = f"mcp__{_required_str(item, 'server', f'{where}.item')}"
            output += [call, _function_call_output_item(call_id, _codex_result_text(item))]
        elif kind == "command_execution":
            call_id = f"call_{item.get('id') or uuid.uuid4().hex}"
            command = json.dumps({"cmd": item.get("command") or ""})
            output += [
                _function_call_item(call_id, "exec_command", command),
                _function_call_output_item(call_id, str(item.get("aggregated_output") or "")),
            ]
    _append_final_text(output, final_text)
    return _response(output, model, usage, "codex-exec")


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
    for index, message in enumerate(_message_list(messages)):
        where = f"messages[{index}]"
        role = _role(message, where, ("system", "developer", "user", "assistant", "tool"))
        if role == "assistant":
            output.extend(_chat_assistant_items(message, where))
        elif role == "tool":
            call_id = _required_str(message, "tool_call_id", where)
            text = _chat_text(message.get("content"), where, allow_refusal=False)
            output.append(_function_call_output_item(call_id, text))
        # system / developer / user: the prompt, or user input mid-rollout; not agent output.
    _append_final_text(output, final_text)
    return _response(output, model, usage, "openai-chat")


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
    for index, message in enumerate(_message_list(messages)):
        where = f"messages[{index}]"
        role = _role(message, where, ("user", "assistant", "system"))
        content = message.get("content")
        if role == "assistant":
            output.extend(_anthropic_assistant_items(content, where))
        elif role == "user" and isinstance(content, list):
            for block_index, block in enumerate(content):
                bwhere = f"{where}.content[{block_index}]"
                if not isinstance(block, Mapping):
                    raise TrajectoryError(
                        f"{bwhere}: content block must be an object, got {_type_name(block)}"
                    )
                if block.get("type") == "tool_result":
                    output.append(_anthropic_tool_result(block, bwhere))
                # text, image, document...: user input, not agent output.
        elif role == "user" and content is not None and not isinstance(content, str):
            raise TrajectoryError(f"{where}: content must be a string or a list, got {_type_name(content)}")
    _append_final_text(output, final_text)
    return _response(output, model, usage, "anthropic")


def from_recorded(
    calls: Sequence[ToolCallRecord],
    final_text: str | None = None,
    model: str = DEFAULT_MODEL,
    *,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The bridge's own log of served tool calls -> Responses object.

    Each record becomes a ``function_call`` (``name`` = the name as the harness emitted it; the
    verify layer maps it to the canonical name) followed by its ``function_call_output``; then
    ``final_text``, if given, as the final assistant message.
    """
    output: list[dict[str, Any]] = []
    for index, record in enumerate(calls):
        where = f"recorded[{index}]"
        try:
            arguments = json.dumps(record.arguments)
        except (TypeError, ValueError) as exc:
            raise TrajectoryError(f"{where}: arguments are not JSON-serializable: {exc}") from exc
        if not record.call_id:
            raise TrajectoryError(f"{where}: record has no call_id")
        output.append(_function_call_item(record.call_id, record.emitted_name, arguments))
        output.append(_function_call_output_item(record.call_id, record.output))
    if final_text:
        output.append(_message_item(final_text))
    return _response(output, model, usage, "recorded")


def function_calls(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``function_call`` items of a Responses object's ``output``, in order.

    Returns the item objects themselves (not copies), so a caller holding a deep copy of the
    response can rename them in place. A response without a list ``output`` has none.
    """
    output = response.get("output") if isinstance(response, Mapping) else None
    if not isinstance(output, list):
        return []
    return [item for item in output if isinstance(item, dict) and item.get("type") == "function_call"]


# --------------------------------------------------------------------------------------------
# Output items (shapes as Gym records them in example_rollouts.jsonl)
# --------------------------------------------------------------------------------------------


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _message_item(text: str, refusal: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text or refusal is None:
        content.append({"type": "output_text", "text": text, "annotations": []})
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": content,
    }


def _function_call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": _new_id("fc"),
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _function_call_output_item(call_id: str, output: str) -> dict[str, Any]:
    # Gym's recorded rollouts carry id/status as null on function_call_output items.
    return {"type": "function_call_output", "call_id": call_id, "output": output, "id": None, "status": None}


def _reasoning_item(texts: Sequence[str], encrypted_content: str | None = None) -> dict[str, Any]:
    return {
        "id": _new_id("rs"),
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": t} for t in texts],
        "encrypted_content": encrypted_content,
    }


def _message_text(item: Mapping[str, Any]) -> str | None:
    if item.get("type") != "message":
        return None
    return "".join(
        part.get("text", "") for part in item.get("content", []) if part.get("type") == "output_text"
    )


def _append_final_text(output: list[dict[str, Any]], final_text: str | None) -> None:
    """Append ``final_text`` as the last assistant message unless the output already ends with it."""
    if not final_text:
        return
    if output:
        last = _message_text(output[-1])
        if last is not None and last.strip() == final_text.strip():
            return
    output.append(_message_item(final_text))


def _response(
    output: list[dict[str, Any]], model: str, usage: Mapping[str, Any] | None, fmt: str
) -> dict[str, Any]:
    return {
        "id": _new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {"source": "gym-mcp-bridge", "trajectory_format": fmt},
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage(usage),
    }


# --------------------------------------------------------------------------------------------
# Usage
# --------------------------------------------------------------------------------------------


def _usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Responses usage from Responses-, Chat Completions- or Anthropic-style token counts.

    Responses' ``input_tokens`` includes cached tokens, Anthropic's excludes them, so the
    Anthropic cache read/creation counts are added in (``cached_tokens`` = cache reads).
    """
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise TrajectoryError(f"usage must be an object, got {_type_name(usage)}")
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        input_tokens = _count(usage, "prompt_tokens")
        output_tokens = _count(usage, "completion_tokens")
        cached = _count(
            _details(usage, "prompt_tokens_details"), "cached_tokens", "usage.prompt_tokens_details"
        )
        reasoning = _count(
            _details(usage, "completion_tokens_details"),
            "reasoning_tokens",
            "usage.completion_tokens_details",
        )
    elif "input_tokens" in usage or "output_tokens" in usage:
        cache_read = _count(usage, "cache_read_input_tokens")
        cache_creation = _count(usage, "cache_creation_input_tokens")
        input_tokens = _count(usage, "input_tokens") + cache_read + cache_creation
        output_tokens = _count(usage, "output_tokens")
        cached = _count(
            _details(usage, "input_tokens_details"), "cached_tokens", "usage.input_tokens_details"
        )
        cached = cached or cache_read
        reasoning = _count(
            _details(usage, "output_tokens_details"), "reasoning_tokens", "usage.output_tokens_details"
        )
    else:
        raise TrajectoryError("usage needs input_tokens/output_tokens (or prompt_tokens/completion_tokens)")
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def _details(usage: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = usage.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TrajectoryError(f"usage.{key} must be an object, got {_type_name(value)}")
    return value


def _count(mapping: Mapping[str, Any], key: str, where: str = "usage") -> int:
    value = mapping.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TrajectoryError(f"{where}.{key} must be a non-negative integer, got {_short(value)}")
    return value


# --------------------------------------------------------------------------------------------
# OpenAI Chat Completions
# --------------------------------------------------------------------------------------------


def _chat_assistant_items(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise TrajectoryError(f"{where}: {key} must be a string, got {_type_name(value)}")
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
        raise TrajectoryError(f"{where}: refusal must be a string, got {_type_name(refusal)}")
    refusal = "".join([*refusals, refusal or ""]) if refusals else refusal
    if "function_call" in message and message["function_call"] is not None and not message.get("tool_calls"):
        raise TrajectoryError(f"{where}: legacy function_call is not supported; use tool_calls")

    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        tool_calls = []
    if not isinstance(tool_calls, list):
        raise TrajectoryError(f"{where}: tool_calls must be a list, got {_type_name(tool_calls)}")
    calls = [_chat_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(tool_calls)]

    if reasoning:
        items.append(_reasoning_item(reasoning))
    if text or refusal or not (reasoning or calls):
        items.append(_message_item(text, refusal or None))
    items.extend(calls)
    return items


def _chat_tool_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        raise TrajectoryError(f"{where}: tool call must be an object, got {_type_name(call)}")
    call_type = call.get("type", "function")
    if call_type != "function":
        raise TrajectoryError(f"{where}: unsupported tool call type {_short(call_type)}; only function")
    call_id = _required_str(call, "id", where)
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise TrajectoryError(f"{where}: function must be an object, got {_type_name(function)}")
    name = _required_str(function, "name", f"{where}.function")
    arguments = _arguments(function.get("arguments"), f"{where}.function.arguments")
    return _function_call_item(call_id, name, arguments)


def _arguments(value: Any, where: str) -> str:
    """A tool call's arguments as the string Responses carries.

    A string passes through unchanged even when it is not valid JSON: Gym records a model's
    malformed arguments as emitted and scores them, so refusing them here would drop exactly the
    rollouts that should score low."""
    if value is None or value == "":
        return "{}"
    if isinstance(value, Mapping):
        return json.dumps(dict(value))
    if not isinstance(value, str):
        raise TrajectoryError(f"{where} must be a JSON string, got {_type_name(value)}")
    return value


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
            f"{where}: content must be a string or a list of parts, got {_type_name(content)}"
        )
    texts: list[str] = []
    refusals: list[str] = []
    for i, part in enumerate(content):
        pwhere = f"{where}.content[{i}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            raise TrajectoryError(f"{pwhere}: part must be an object, got {_type_name(part)}")
        part_type = part.get("type")
        if part_type in ("text", "output_text", "input_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise TrajectoryError(f"{pwhere}: text must be a string, got {_type_name(text)}")
            texts.append(text)
        elif part_type == "refusal" and allow_refusal:
            refusal = part.get("refusal")
            if not isinstance(refusal, str):
                raise TrajectoryError(f"{pwhere}: refusal must be a string, got {_type_name(refusal)}")
            refusals.append(refusal)
        else:
            raise TrajectoryError(f"{pwhere}: unsupported content part type {_short(part_type)}")
    return "".join(texts), refusals


# --------------------------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------------------------


def _anthropic_assistant_items(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        content = ""
    if isinstance(content, str):
        return [_message_item(content)]
    if not isinstance(content, list):
        raise TrajectoryError(f"{where}: content must be a string or a list, got {_type_name(content)}")

    items: list[dict[str, Any]] = []
    pending_text: list[str] = []

    def flush() -> None:
        if pending_text:
            items.append(_message_item("".join(pending_text)))
            pending_text.clear()

    for i, block in enumerate(content):
        bwhere = f"{where}.content[{i}]"
        if not isinstance(block, Mapping):
            raise TrajectoryError(f"{bwhere}: content block must be an object, got {_type_name(block)}")
        block_type = block.get("type")
        if block_type == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise TrajectoryError(f"{bwhere}: text must be a string, got {_type_name(text)}")
            pending_text.append(text)
        elif block_type == "thinking":
            flush()
            thinking = block.get("thinking", block.get("text"))
            if not isinstance(thinking, str):
                raise TrajectoryError(f"{bwhere}: thinking must be a string, got {_type_name(thinking)}")
            signature = block.get("signature")
            items.append(_reasoning_item([thinking], signature if isinstance(signature, str) else None))
        elif block_type == "redacted_thinking":
            flush()
            data = block.get("data")
            items.append(_reasoning_item([], data if isinstance(data, str) else None))
        elif block_type in ("tool_use", "mcp_tool_use"):
            flush()
            call_id = _required_str(block, "id", bwhere)
            name = _required_str(block, "name", bwhere)
            tool_input = block.get("input")
            if tool_input is None:
                tool_input = {}
            if not isinstance(tool_input, Mapping):
                raise TrajectoryError(f"{bwhere}: input must be an object, got {_type_name(tool_input)}")
            items.append(_function_call_item(call_id, name, json.dumps(dict(tool_input))))
        elif block_type == "mcp_tool_result":
            flush()
            items.append(_anthropic_tool_result(block, bwhere))
        elif block_type in _ANTHROPIC_SERVER_TOOL_USE or (
            isinstance(block_type, str) and block_type.endswith("_tool_result")
        ):
            continue  # Anthropic-hosted tool (web search, code execution...): not a Gym tool.
        else:
            raise TrajectoryError(f"{bwhere}: unsupported assistant content block type {_short(block_type)}")
    flush()
    if not items:
        items.append(_message_item(""))
    return items


def _anthropic_tool_result(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    call_id = _required_str(block, "tool_use_id", where)
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise TrajectoryError(f"{where}: is_error must be a boolean, got {_type_name(is_error)}")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise TrajectoryError(f"{where}.content[{i}]: must be an object, got {_type_name(part)}")
            if part.get("type") == "text":
                part_text = part.get("text")
                if not isinstance(part_text, str):
                    raise TrajectoryError(f"{where}.content[{i}]: text must be a string")
                texts.append(part_text)
            # image / document / search_result parts carry nothing a text verifier reads.
        text = "\n".join(texts)
    else:
        raise TrajectoryError(f"{where}: content must be a string or a list, got {_type_name(content)}")
    return _function_call_output_item(call_id, text)


# --------------------------------------------------------------------------------------------
# Shared validation helpers
# --------------------------------------------------------------------------------------------


def _message_list(messages: Any) -> list[Mapping[str, Any]]:
    if not isinstance(messages, list):
        raise TrajectoryError(f"messages must be a list, got {_type_name(messages)}")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TrajectoryError(f"messages[{index}]: message must be an object, got {_type_name(message)}")
    return messages


def _role(message: Mapping[str, Any], where: str, allowed: Sequence[str]) -> str:
    role = message.get("role")
    if role not in allowed:
        raise TrajectoryError(f"{where}: role must be one of {', '.join(allowed)}; got {_short(role)}")
    return str(role)


def _required_str(mapping: Mapping[str, Any], key: str, where: str) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or not value:
        if key not in mapping or value is None:
            raise TrajectoryError(f"{where}: missing {key}")
        raise TrajectoryError(f"{where}: {key} must be a non-empty string, got {_short(value)}")
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
    }.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
