"""The record of one tool call served for a session.

Sessions append a ``ToolCallRecord`` for every ``tools/call`` (and every tool passthrough made
with a session token) in the order served; ``trajectory.from_recorded`` turns that log into a
Responses object for ``/verify``. Each record knows its size (``size``: arguments as JSON plus the
output, in UTF-8 bytes), measured once when it is built, which the session registry charges
against its log byte budgets.

A session log keeps each record as a plain tuple of strings, numbers and bytes (``as_row``, the
arguments as the JSON the upstream received for a call the bridge served, else as their own JSON
when that reads back equal; ``from_row`` gives the record back, integers exact). Python's
cyclic garbage collector watches every instance of a class and every tuple holding a dict, and
drops a tuple of such atomic values from its watch after one pass: a bridge holding a few hundred
thousand logged calls otherwise has every full collection walk all of them, a pause of 100 ms and
more for every request in flight.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson

from bridge import exactjson

# ToolCallRecord.as_row: its fields in order, the arguments as JSON bytes where they read back equal
LogRow = tuple[str, str, str, "bytes | dict[str, Any]", str, bool, float, float, int]


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
    size: int = -1  # measured from the arguments and output unless given (a row read back)
    packed: bytes | dict[str, Any] | None = field(default=None, repr=False, compare=False)  # _compact's

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = record_size(self.arguments, self.output)

    def as_row(self) -> LogRow:
        """The record's fields as a plain tuple, in order: what a session log keeps."""
        return (
            self.call_id, self.emitted_name, self.canonical_name,
            self.packed if self.packed is not None else _compact(self.arguments), self.output,
            self.is_error, self.started_at, self.duration_s, self.size,
        )  # fmt: skip

    @classmethod
    def from_row(cls, row: LogRow) -> ToolCallRecord:
        arguments = row[3]
        if isinstance(arguments, bytes):
            arguments = exactjson.loads(arguments)
        return cls(row[0], row[1], row[2], arguments, row[4], row[5], row[6], row[7], row[8])

    @classmethod
    def served(
        cls, name: str, emitted: str | None, arguments: dict[str, Any], output: str, is_error: bool,
        started: float, elapsed: float, sent: bytes | None = None,
    ) -> ToolCallRecord:  # fmt: skip
        """The record of a call just served, under a fresh ``call_id``. ``sent``: the arguments as the
        upstream received them (``exactjson.dumps``), which the log keeps as they are; without it,
        they are encoded here and kept as bytes only where those read back equal."""
        call_id = f"call_{secrets.token_hex(12)}"
        packed = (
            kept(sent) if sent is not None else _compact(arguments)
        )  # one encoding for the log and the size
        size = len(packed) + utf8_len(output) if isinstance(packed, bytes) else record_size(arguments, output)
        return cls(
            call_id, emitted or name, name, arguments, output, is_error, started, elapsed, size, packed
        )


def _compact(arguments: dict[str, Any]) -> bytes | dict[str, Any]:
    """The arguments as JSON bytes when those read back equal to them (orjson keeps int, float,
    bool, str, list and dict apart), else the dict itself (a NaN, an integer past 64 bits, a tuple)."""
    try:
        encoded = orjson.dumps(arguments)
    except (orjson.JSONEncodeError, TypeError):
        return arguments
    return kept(encoded) if orjson.loads(encoded) == arguments else arguments


def kept(encoded: bytes) -> bytes:
    """A copy of orjson's output the size of its content, for a log that keeps it: orjson's bytes
    keep the buffer it wrote into (4 KiB for a 12-byte ``{"count":1}``), which a session log kept
    for hours would hold for every call."""
    return bytes(memoryview(encoded))


def record_size(arguments: dict[str, Any], output: str) -> int:
    """Bytes a call's log entry holds: its arguments as JSON plus its output, both as UTF-8."""
    try:
        argument_bytes = len(exactjson.dumps(arguments))
    except (TypeError, ValueError):
        argument_bytes = utf8_len(repr(arguments))
    return argument_bytes + utf8_len(output)


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
