"""The record of one tool call served for a session.

Sessions append a ``ToolCallRecord`` for every ``tools/call`` (and every tool passthrough made
with a session token) in the order served; ``trajectory.from_recorded`` turns that log into a
Responses object for ``/verify``. Each record knows its size (``size``: arguments as JSON plus the
output, in UTF-8 bytes), measured once when it is built, which the session registry charges
against its log byte budgets.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson


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
    size: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.size = record_size(self.arguments, self.output)

    @classmethod
    def served(
        cls, name: str, emitted: str | None, arguments: dict[str, Any], output: str, is_error: bool,
        started: float, elapsed: float,
    ) -> ToolCallRecord:  # fmt: skip
        """The record of a call just served, under a fresh ``call_id``."""
        call_id = f"call_{secrets.token_hex(12)}"
        return cls(call_id, emitted or name, name, arguments, output, is_error, started, elapsed)


def record_size(arguments: dict[str, Any], output: str) -> int:
    """Bytes a call's log entry holds: its arguments as JSON plus its output, both as UTF-8."""
    try:
        argument_bytes = len(orjson.dumps(arguments))
    except (orjson.JSONEncodeError, TypeError):
        argument_bytes = utf8_len(repr(arguments))
    return argument_bytes + utf8_len(output)


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
