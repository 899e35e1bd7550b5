"""The bridge's own log of the tool calls it served for a session -> a Responses object."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bridge.calllog import ToolCallRecord
from bridge.scoring.trajectory.items import (
    DEFAULT_MODEL,
    TrajectoryError,
    function_call_item,
    function_call_output_item,
    message_item,
    responses_object,
)


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
        output.append(function_call_item(record.call_id, record.emitted_name, arguments))
        output.append(function_call_output_item(record.call_id, record.output))
    if final_text:
        output.append(message_item(final_text))
    return responses_object(output, model, usage, "recorded")
