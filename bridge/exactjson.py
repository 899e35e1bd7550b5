"""JSON read and written without changing a number: what the bridge parses and passes on.

orjson reads an integer outside ``[-2**63, 2**64)`` as the nearest float and refuses to write one;
Gym's servers (Starlette's ``json.loads``, pydantic) keep every integer exact. A tool argument or a
row field such as ``18446744073709551617`` that went through orjson alone reached the upstream as
``1.8446744073709552e+19``: refused by an ``int`` field, or scored against another number.

``loads`` parses with orjson and, only when the result holds a float that an out-of-range integer
could have become (magnitude ``>= 2**63``), parses the same text again with the standard library,
which keeps integers exact; the result is otherwise orjson's. ``dumps`` writes with orjson and falls
back to the standard library (compact, UTF-8) for what orjson refuses to write: integers past 64
bits. Every document the bridge reads from a client or an upstream and writes on -- tool arguments,
rows, ``/verify`` bodies, upstream answers -- goes through these two.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError  # a ValueError
_WIDE = 2.0**63  # no float below this in magnitude can have been an out-of-range integer


def loads(data: bytes | str) -> Any:
    """``data`` as JSON with every integer exact; ``JSONDecodeError`` when it is not JSON."""
    value = orjson.loads(data)
    if not _holds_wide_float(value):
        return value
    try:
        return json.loads(data)
    except RecursionError:  # past ~1000 levels, which orjson (1024) still reads
        raise JSONDecodeError("JSON nested too deeply to read its integers exactly", "", 0) from None


def dumps(value: Any, default: Callable[[Any], Any] | None = None, sort_keys: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON, integers past 64 bits included (``orjson.dumps`` otherwise);
    ``default`` turns what JSON has no type for into what it has, as in both libraries; ``sort_keys``
    gives a canonical form to compare two documents by."""
    try:
        return orjson.dumps(value, default=default, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except orjson.JSONEncodeError:
        text = json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), default=default, sort_keys=sort_keys
        )
        return text.encode()


def _holds_wide_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and (item >= _WIDE or item <= -_WIDE):
            return True
    return False
