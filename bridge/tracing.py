"""OpenTelemetry traces: one span per MCP request, REST call, upstream call and verify.

Off, and free, unless the standard ``OTEL_*`` environment says where spans go
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or
``OTEL_TRACES_EXPORTER=otlp|console``; ``OTEL_SDK_DISABLED=true`` wins): then ``configure`` installs
the SDK's tracer provider with a batch processor and the OTLP/HTTP (or console) exporter, and
``ENABLED`` is true. Every hook checks ``ENABLED`` first, so a bridge without tracing runs no
OpenTelemetry code per request.

Data flow: the request's W3C ``traceparent`` (an HTTP header, or ``params._meta.traceparent`` of an
MCP request, as MCP 2026-07-28 carries it) is the parent of the server span; the span is current
while the request runs, so the upstream call's client span is its child, and ``inject`` writes that
span's ``traceparent`` into the headers sent upstream (a Gym server that traces joins the trace).
Spans carry the tool, its canonical name, the outcome and a hash of the session id; never
arguments, results or tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

ENABLED = False
_tracer: trace.Tracer = trace.NoOpTracer()


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` environment asks for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return bool(endpoint) or exporter in ("otlp", "console")


def configure(version: str) -> bool:
    """Install the SDK's tracer provider when the environment asks for traces; whether it did."""
    global ENABLED, _tracer
    if not wanted():
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

    exporter: SpanExporter
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "gym-mcp-bridge")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("gym_mcp_bridge", version)
    ENABLED = True
    return True


def shutdown() -> None:
    """Flush the spans still queued (at exit)."""
    provider = trace.get_tracer_provider()
    if ENABLED and hasattr(provider, "shutdown"):
        provider.shutdown()


def session_hash(sid: str) -> str:
    """What spans and the audit log say instead of the session id."""
    return hashlib.sha256(sid.encode()).hexdigest()[:16]


def parent_from(headers: Mapping[str, str], meta: Any = None) -> Any:
    """The parent context: ``traceparent`` in MCP ``_meta`` wins over the HTTP header."""
    carrier = dict(headers)
    if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
        carrier = {"traceparent": meta["traceparent"]}
        if isinstance(meta.get("tracestate"), str):
            carrier["tracestate"] = meta["tracestate"]
    return propagate.extract(carrier)


@contextlib.contextmanager
def span(name: str, kind: SpanKind, parent: Any = None, **attributes: Any) -> Iterator[Span | None]:
    """A current span (None when tracing is off); an exception marks it as an error."""
    if not ENABLED:
        yield None
        return
    with _tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=attributes, record_exception=True
    ) as current:
        yield current


def annotate(**attributes: Any) -> None:
    """Attributes on the current span (the tool call's outcome, once known)."""
    if ENABLED:
        current = trace.get_current_span()
        for key, value in attributes.items():
            if value is not None:
                current.set_attribute(key, value)
        if attributes.get("gym.outcome") not in (None, "ok"):
            current.set_status(Status(StatusCode.ERROR, str(attributes["gym.outcome"])))


def inject(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus the current span's ``traceparent`` (a copy; the same dict when tracing is off)."""
    if not ENABLED:
        return headers
    sent = dict(headers)
    propagate.inject(sent)
    return sent
