"""The record of one tool call served for a session.

Sessions append a ``ToolCallRecord`` for every ``tools/call`` (and every tool passthrough made
with a session token) in the order served; ``trajectory.from_recorded`` turns that log into a
Responses object for ``/verify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ToolCallRecord:
    call_id: str
    emitted_name: str
    canonical_name: str
    arguments: dict[str, Any]
    output: str
    is_error: bool
    started_at: float
    duration_s: float
    extra: dict[str, Any] = field(default_factory=dict)
