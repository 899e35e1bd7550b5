"""What one upstream call came to, as plain values the HTTP layer renders.

``Bridge.call_tool`` turns the upstream's answer into a ``ToolOutcome``: ``answered`` for an HTTP
answer of a Gym tool route, ``mcp_answered`` for a ``tools/call`` result of an MCP-native upstream,
``failed`` for a call the upstream never answered (or that was never sent). ``label`` names the
outcome for metrics and traces. ``VerifyOutcome`` is the same for ``/verify``. A call the upstream
never answered carries ``failure``: its name in Gym's words (``bridge.failures``); the upstream's own
answers, errors included, carry none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from bridge import exactjson, failures
from bridge.upstream import UpstreamRequestRefused, UpstreamResponse, UpstreamTimeout


@dataclass(slots=True)
class ToolOutcome:
    status: int
    body: bytes
    content_type: str
    is_error: bool
    set_cookies: list[str]
    message: str  # what a model reads: the upstream's text, or why the call failed
    value: Any = None  # the upstream's JSON answer, when it is JSON
    failure: failures.Failure | None = None  # a failure of the bridge's own making, in Gym's words


@dataclass(frozen=True, slots=True)
class VerifyOutcome:
    """The upstream's verify answer, and when it was a JSON object, that object as the caller gets
    it (names restored, ``_bridge`` added) with the report for ``verify.REPORT_HEADER``."""

    upstream: UpstreamResponse
    payload: dict[str, Any] | None
    report_header: str | None


def answered(response: UpstreamResponse) -> ToolOutcome:
    """A tool route's HTTP answer. An upstream error answer (a Gym validation 422, a 500) reads
    exactly as over plain HTTP: Gym's agents hand the model the body as it came; ``is_error``
    carries the status."""
    text = response.text
    content_type = response.content_type or "application/json"
    value, message, failed = None, text, not response.is_success
    if not failed and "json" in content_type and response.content:
        try:
            value = response.json()
        except ValueError:
            failed = True
            message = f"upstream answered HTTP {response.status_code} with invalid JSON: {text}"
    return ToolOutcome(
        status=response.status_code,
        body=response.content,
        content_type=content_type,
        is_error=failed,
        set_cookies=response.header_list("set-cookie"),
        message=message,
        value=value,
    )


def mcp_answered(response: UpstreamResponse, text: str, is_error: bool, structured: Any) -> ToolOutcome:
    """An MCP-native upstream's ``tools/call`` result, as that endpoint gave it."""
    return ToolOutcome(
        status=response.status_code,
        body=exactjson.dumps(structured) if structured is not None else text.encode(),
        content_type="application/json" if structured is not None else "text/plain; charset=utf-8",
        is_error=is_error,
        set_cookies=[],
        message=text,
        value=structured,
    )


def failed(exc: Exception) -> ToolOutcome:
    """A call the upstream did not answer (or that was not sent): its reason, as an error."""
    kind, reason = failure_name(exc), str(exc)
    return ToolOutcome(
        status=failure_status(exc),
        body=orjson.dumps(failures.refusal_body(reason, kind)),
        content_type="application/json",
        is_error=True,
        set_cookies=[],
        message=reason,
        failure=failures.of(kind, reason),
    )


def failure_status(exc: Exception) -> int:
    """The gateway status of a request the upstream did not answer (or that was not sent)."""
    if isinstance(exc, UpstreamTimeout):
        return 504
    if isinstance(exc, UpstreamRequestRefused):
        return 400
    return 502


def failure_name(exc: Exception) -> str:
    """The failure name (``bridge.failures.KINDS``) of a request the upstream did not answer."""
    if isinstance(exc, UpstreamTimeout):
        return "upstream_timeout"
    if isinstance(exc, UpstreamRequestRefused):
        return "upstream_refused"
    return "upstream_unreachable"


def label(outcome: ToolOutcome) -> str:
    if not outcome.is_error:
        return "ok"
    if outcome.status == 504:
        return "timeout"
    if outcome.status == 502:
        return "unavailable"
    return "upstream_error"
