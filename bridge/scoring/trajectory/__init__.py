"""Trajectory conversion: what a harness produced -> a Responses-API ``response`` for ``/verify``.

Owns: turning a harness transcript (OpenAI Chat Completions messages, Anthropic Messages, Codex's
``exec --json`` events, or the bridge's own log of the tool calls it served) into the OpenAI
Responses object that NeMo Gym's ``/verify`` takes as ``response`` (Gym's ``NeMoGymResponse``),
and finding the ``function_call`` items in such an object. It does not own scoring, tool-name
normalization (the verify layer renames ``function_call`` names to canonical ones later) or
HTTP; it never imports ``nemo_gym``.

One module per format (``openai_chat``, ``anthropic``, ``codex_exec``, ``recorded``); what they
share (output items, the Responses envelope, usage, validation errors) is in ``items``. This
package validates the ``trajectory`` body and dispatches.

Data flow: ``POST /verify`` with ``trajectory: {"format", "messages", "final_text", "usage",
"model"}`` -> ``from_trajectory`` validates the shape and dispatches on ``format`` ->
``from_openai_chat`` / ``from_anthropic`` / ``from_codex_exec`` / ``from_recorded`` build the
``output`` items -> ``items.responses_object`` wraps them in the top-level Responses fields.
Any malformed input raises
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

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.calllog import ToolCallRecord
from bridge.scoring.trajectory.anthropic import from_anthropic
from bridge.scoring.trajectory.codex_exec import from_codex_exec
from bridge.scoring.trajectory.items import (
    DEFAULT_MODEL,
    TrajectoryError,
    function_calls,
    short_repr,
    type_name,
)
from bridge.scoring.trajectory.openai_chat import from_openai_chat
from bridge.scoring.trajectory.recorded import from_recorded

__all__ = [
    "DEFAULT_MODEL",
    "FORMATS",
    "TrajectoryError",
    "from_anthropic",
    "from_codex_exec",
    "from_openai_chat",
    "from_recorded",
    "from_trajectory",
    "function_calls",
]

FORMATS = ("openai-chat", "anthropic", "recorded", "codex-exec")
_TRAJECTORY_KEYS = frozenset({"format", "messages", "final_text", "usage", "model"})


def from_trajectory(trajectory: Mapping[str, Any], recorded: Sequence[ToolCallRecord]) -> dict[str, Any]:
    """Validate a ``/verify`` ``trajectory`` body and convert it to a Responses object.

    ``trajectory`` is ``{"format": "openai-chat" | "anthropic" | "recorded" | "codex-exec", "messages": [...],
    "final_text": str | None, "usage": {...} | None, "model": str | None}``. ``messages`` is
    required for the two transcript formats and ignored for ``recorded``, which is built from
    ``recorded`` (the session's log of served tool calls, in order).
    """
    if not isinstance(trajectory, Mapping):
        raise TrajectoryError(f"trajectory must be an object, got {type_name(trajectory)}")
    unknown = sorted(str(k) for k in trajectory if k not in _TRAJECTORY_KEYS)
    if unknown:
        raise TrajectoryError(
            f"trajectory has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_TRAJECTORY_KEYS))}"
        )
    fmt = trajectory.get("format")
    if fmt not in FORMATS:
        raise TrajectoryError(f"trajectory.format must be one of {', '.join(FORMATS)}; got {short_repr(fmt)}")
    final_text = trajectory.get("final_text")
    if final_text is not None and not isinstance(final_text, str):
        raise TrajectoryError(f"trajectory.final_text must be a string, got {type_name(final_text)}")
    model = trajectory.get("model")
    if model is None:
        model = DEFAULT_MODEL
    elif not isinstance(model, str) or not model:
        raise TrajectoryError(f"trajectory.model must be a non-empty string, got {short_repr(model)}")
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
