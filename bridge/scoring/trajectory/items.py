"""What every trajectory format shares: the Responses output items and envelope (shapes as Gym
records them in ``example_rollouts.jsonl``), token usage in any of the three dialects, and the
one-line validation errors (``TrajectoryError``) the route answers as a 400.

The format modules (``openai_chat``, ``anthropic``, ``codex_exec``, ``recorded``) build ``output``
items with these helpers and wrap them with :func:`responses_object`; nothing here knows a format.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_MODEL = "gym-mcp-bridge"


class TrajectoryError(ValueError):
    """A trajectory the bridge cannot convert; the message is a one-line reason for a 400."""

    def __init__(self, reason: str) -> None:
        super().__init__(" ".join(str(reason).split()))


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


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(text: str, refusal: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text or refusal is None:
        content.append({"type": "output_text", "text": text, "annotations": []})
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": content,
    }


def function_call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": new_id("fc"),
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def function_call_output_item(call_id: str, output: str) -> dict[str, Any]:
    # Gym's recorded rollouts carry id/status as null on function_call_output items.
    return {"type": "function_call_output", "call_id": call_id, "output": output, "id": None, "status": None}


def reasoning_item(texts: Sequence[str], encrypted_content: str | None = None) -> dict[str, Any]:
    return {
        "id": new_id("rs"),
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": t} for t in texts],
        "encrypted_content": encrypted_content,
    }


def message_text(item: Mapping[str, Any]) -> str | None:
    if item.get("type") != "message":
        return None
    return "".join(
        part.get("text", "") for part in item.get("content", []) if part.get("type") == "output_text"
    )


def append_final_text(output: list[dict[str, Any]], final_text: str | None) -> None:
    """Append ``final_text`` as the last assistant message unless the output already ends with it."""
    if not final_text:
        return
    if output:
        last = message_text(output[-1])
        if last is not None and last.strip() == final_text.strip():
            return
    output.append(message_item(final_text))


def responses_object(
    output: list[dict[str, Any]], model: str, usage: Mapping[str, Any] | None, fmt: str
) -> dict[str, Any]:
    return {
        "id": new_id("resp"),
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
        "usage": responses_usage(usage),
    }


# --------------------------------------------------------------------------------------------
# Usage
# --------------------------------------------------------------------------------------------


def responses_usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Responses usage from Responses-, Chat Completions- or Anthropic-style token counts.

    Responses' ``input_tokens`` includes cached tokens, Anthropic's excludes them, so the
    Anthropic cache read/creation counts are added in (``cached_tokens`` = cache reads).
    """
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise TrajectoryError(f"usage must be an object, got {type_name(usage)}")
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
        raise TrajectoryError(f"usage.{key} must be an object, got {type_name(value)}")
    return value


def _count(mapping: Mapping[str, Any], key: str, where: str = "usage") -> int:
    value = mapping.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TrajectoryError(f"{where}.{key} must be a non-negative integer, got {short_repr(value)}")
    return value


def arguments_text(value: Any, where: str) -> str:
    """A tool call's arguments as the string Responses carries.

    A string passes through unchanged even when it is not valid JSON: Gym records a model's
    malformed arguments as emitted and scores them, so refusing them here would drop exactly the
    rollouts that should score low."""
    if value is None or value == "":
        return "{}"
    if isinstance(value, Mapping):
        return json.dumps(dict(value))
    if not isinstance(value, str):
        raise TrajectoryError(f"{where} must be a JSON string, got {type_name(value)}")
    return value


# --------------------------------------------------------------------------------------------
# Shared validation helpers
# --------------------------------------------------------------------------------------------


def message_list(messages: Any) -> list[Mapping[str, Any]]:
    if not isinstance(messages, list):
        raise TrajectoryError(f"messages must be a list, got {type_name(messages)}")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TrajectoryError(f"messages[{index}]: message must be an object, got {type_name(message)}")
    return messages


def checked_role(message: Mapping[str, Any], where: str, allowed: Sequence[str]) -> str:
    role = message.get("role")
    if role not in allowed:
        raise TrajectoryError(f"{where}: role must be one of {', '.join(allowed)}; got {short_repr(role)}")
    return str(role)


def required_str(mapping: Mapping[str, Any], key: str, where: str) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or not value:
        if key not in mapping or value is None:
            raise TrajectoryError(f"{where}: missing {key}")
        raise TrajectoryError(f"{where}: {key} must be a non-empty string, got {short_repr(value)}")
    return value


def type_name(value: Any) -> str:
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


def short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
