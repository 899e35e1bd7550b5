"""``POST /verify``: score a rollout with the upstream's own ``/verify``, under canonical tool names.

Data flow: the body (Gym row fields + ``response``, or ``trajectory``) and the session it names
(or none) → the Responses object (given, or converted by ``trajectory``) → the seeded row fills
in when the caller sent no row fields → a deep copy whose ``function_call`` names are resolved by
``naming`` against the session's tool names (or the body's own tools), on evidence only: the
known aliases of this server (its name, the ``server_aliases`` setting, ``_bridge.server_aliases``
in the body, stripped before forwarding) and those the session's own log proves → upstream
``/verify`` with the session's cookie → the upstream's answer, with names restored to what the
harness emitted (matched by ``call_id``) and ``_bridge`` added, with ``provenance`` (which calls
this bridge served for the session, signed; see ``provenance``). The bridge never computes a reward:
a rollout whose agent never ran is marked ``mask_sample: true``, a lost session never reaches the
upstream, and a ``recorded`` trajectory from an incomplete log is refused (409).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry.trace import SpanKind
from starlette.responses import Response

from bridge import naming, provenance, tracing, trajectory
from bridge.core import Bridge, Rejected
from bridge.responses import json_response, upstream_response
from bridge.sessions import Session

BRIDGE_KEY = "_bridge"
TYPED_VERIFY_KEY = "verification_input"
REPORT_HEADER = "x-gym-mcp-bridge"
REPORT_HEADER_LIMIT = 4096  # bytes of the report header; past it, counts only


def _declared_aliases(body: dict[str, Any]) -> list[str]:
    """``_bridge.server_aliases`` of a verify body, removed from it; Rejected when malformed."""
    extra = body.pop(BRIDGE_KEY, None)
    if extra is None:
        return []
    aliases = extra.get("server_aliases", []) if isinstance(extra, dict) else None
    if not isinstance(aliases, list) or not all(isinstance(a, str) and 0 < len(a) <= 128 for a in aliases):
        raise Rejected(
            f"{BRIDGE_KEY} must be an object whose server_aliases is a list of names (1-128 characters)",
            400,
            "verify_body",
        )
    return aliases


def _known_names(bridge: Bridge, session: Session | None, body: Mapping[str, Any]) -> Collection[str]:
    if session is not None:
        return session.tool_names
    names = [str(t.get("name")) for t in _row_tools(body) if t.get("name")]
    if names:
        return names
    return bridge.toolsets.openapi.names if bridge.toolsets is not None else ()


def _row_tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    params = body.get("responses_create_params")
    tools = params.get("tools") if isinstance(params, dict) else None
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []


def _response_slot(body: dict[str, Any]) -> dict[str, Any] | None:
    """The dict holding ``response`` (top level, or a typed body's ``verification_input``)."""
    if isinstance(body.get("response"), dict):
        return body
    typed = body.get(TYPED_VERIFY_KEY)
    if isinstance(typed, dict) and isinstance(typed.get("response"), dict):
        return typed
    return None


@dataclass
class NameReport:
    normalized: dict[str, str] = field(default_factory=dict)  # emitted -> canonical
    unresolved: list[dict[str, str]] = field(default_factory=list)  # {"name", "reason"}
    emitted_by_call: dict[str, str] = field(default_factory=dict)  # call_id -> emitted name
    namespaces: dict[str, str] = field(default_factory=dict)  # call_id -> emitted namespace
    conventions: list[str] = field(default_factory=list)  # one per renamed call
    proven_aliases: list[str] = field(default_factory=list)


def _emitted_calls(response: Mapping[str, Any]) -> list[naming.EmittedCall]:
    return [
        naming.EmittedCall(
            item["name"],
            item.get("namespace") if isinstance(item.get("namespace"), str) else None,
            naming.canonical_arguments(item.get("arguments")),
        )
        for item in trajectory.function_calls(response)
        if isinstance(item.get("name"), str)
    ]


def normalize(
    response: dict[str, Any],
    known: Collection[str],
    aliases: Collection[str],
    served: Collection[tuple[str, bytes | None]] = (),
) -> NameReport:
    """Rename ``response``'s function calls in place to canonical names, on the evidence of the known
    ``aliases`` and of the calls the session ``served`` (canonical name, canonical arguments)."""
    report = NameReport()
    proven = naming.prove_aliases(_emitted_calls(response), known, aliases, served) if served else set()
    report.proven_aliases = sorted(proven)
    trusted = {*aliases, *proven}
    for item in trajectory.function_calls(response):
        emitted = item.get("name")
        if not isinstance(emitted, str):
            continue
        namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
        result = naming.resolve(emitted, known, trusted, namespace=namespace)
        if result.canonical is None:
            shown = f"{namespace}.{emitted}" if namespace else emitted
            entry = {"name": shown, "reason": result.reason or naming.UNKNOWN_TOOL}
            if entry not in report.unresolved:
                report.unresolved.append(entry)
            if namespace is not None:
                # Gym reads only ``name``: a namespace item kept as emitted would be scored as the
                # session tool its bare name spells. Gym gets the flat name instead (a tool it does
                # not know); the caller's names come back in the answer.
                call_id = item.get("call_id")
                if isinstance(call_id, str):
                    report.emitted_by_call[call_id] = emitted
                    report.namespaces[call_id] = namespace
                item["name"] = naming.flat_name(emitted, namespace)
                item.pop("namespace", None)
            continue
        if result.canonical == emitted and namespace is None:
            continue
        report.normalized[f"{namespace}.{emitted}" if namespace else emitted] = result.canonical
        report.conventions.append(result.convention or "exact")
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            report.emitted_by_call[call_id] = emitted
            if namespace is not None:
                report.namespaces[call_id] = namespace
        item["name"] = result.canonical
        item.pop("namespace", None)
    return report


def agent_never_ran(response: Mapping[str, Any], recorded_calls: int) -> bool:
    """No tool call served, no output, and no input tokens where usage is stated."""
    if recorded_calls > 0:
        return False
    for item in response.get("output") or []:
        if not isinstance(item, dict):
            return False
        if item.get("type") != "message":
            return False
        content = item.get("content")
        parts = content if isinstance(content, list) else [content]
        if any((p.get("text") if isinstance(p, dict) else p) for p in parts):
            return False
    usage = response.get("usage")
    if isinstance(usage, dict):
        tokens = usage.get("input_tokens", usage.get("prompt_tokens"))
        if isinstance(tokens, int | float) and tokens > 0:
            return False
    return True


def _restore_names(payload: Any, report: NameReport) -> None:
    slot = _response_slot(payload) if isinstance(payload, dict) else None
    if slot is None:
        return
    for item in trajectory.function_calls(slot["response"]):
        call_id = item.get("call_id")
        if isinstance(call_id, str) and call_id in report.emitted_by_call:
            item["name"] = report.emitted_by_call[call_id]
            if call_id in report.namespaces:
                item["namespace"] = report.namespaces[call_id]


async def verify(bridge: Bridge, session: Session | None, body: dict[str, Any], cookies: str) -> Response:
    attributes = {"gym.session": tracing.session_hash(session.sid)} if session is not None else {}
    with tracing.span("verify", SpanKind.INTERNAL, **attributes):
        return await _verify(bridge, session, body, cookies)


async def _verify(bridge: Bridge, session: Session | None, body: dict[str, Any], cookies: str) -> Response:
    started = time.perf_counter()
    if (
        bridge.toolsets is not None
        and not bridge.toolsets.catch_all
        and "verify" not in bridge.upstream_routes
    ):
        raise Rejected(
            "this upstream has no /verify: it scores inside its own tools "
            "(a Gym GymnasiumServer returns each step's reward from its 'step' tool)",
            404,
            "no_verify",
        )
    body = dict(body)
    raw_trajectory = body.pop("trajectory", None)
    if raw_trajectory is not None:
        if "response" in body:
            raise Rejected("give either response or trajectory, not both", 400, "verify_body")
        if isinstance(raw_trajectory, dict) and raw_trajectory.get("format") == "recorded":
            if session is None:
                raise Rejected(
                    "trajectory format 'recorded' needs a session: send the session token header",
                    400,
                    "verify_body",
                )
            gap = session.incomplete_reason()
            if gap is not None:  # never a reward from part of a rollout
                raise Rejected(gap, 409, "log_incomplete")
        try:
            body["response"] = trajectory.from_trajectory(raw_trajectory, session.calls if session else [])
        except trajectory.TrajectoryError as exc:
            raise Rejected(f"invalid trajectory: {exc}", 400, "verify_body") from exc
    declared = _declared_aliases(body)
    typed = TYPED_VERIFY_KEY in body
    if session is not None and not typed and not (set(body) - {"response"}):
        body = {**session.row, **body}
    scoring = copy.deepcopy(body)
    slot = _response_slot(scoring)
    if slot is None and not typed:
        raise Rejected("verify needs a 'response' (Responses object) or a 'trajectory'", 400, "verify_body")
    response = slot["response"] if slot is not None else {}
    aliases = {bridge.upstream.server_name, *bridge.settings.server_aliases, *declared}
    served = (
        [(c.canonical_name, naming.canonical_arguments(c.arguments)) for c in session.calls]
        if session is not None
        else []
    )
    names = normalize(response, _known_names(bridge, session, scoring), aliases, served)
    recorded = session.calls_served if session is not None else 0
    never_ran = agent_never_ran(response, recorded)
    for convention in names.conventions:
        bridge.metrics.normalizations.labels(convention).inc()
    upstream = await bridge.forward(
        "/verify",
        orjson.dumps(scoring),
        session.cookie if session is not None else cookies,
        timeout=bridge.settings.verify_timeout_s,
    )
    bridge.metrics.verify_latency.observe(time.perf_counter() - started)
    report: dict[str, Any] = {
        "normalized": names.normalized,
        "unresolved": names.unresolved,
        "proven_aliases": names.proven_aliases,
        "recorded_tool_calls": recorded,
        "agent_never_ran": never_ran,
    }
    if session is not None:
        scored = [
            provenance.ScoredCall(str(item.get("call_id")), str(item.get("name")), item.get("arguments"))
            for item in trajectory.function_calls(response)
        ]
        report["provenance"] = provenance.attest(session.sid, scored, session.calls, bridge.keys[0])
    try:
        payload = upstream.json() if upstream.is_success else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        bridge.metrics.verify_outcomes.labels(
            "upstream_error" if not upstream.is_success else "passthrough"
        ).inc()
        return upstream_response(upstream)
    _restore_names(payload, names)
    bridge.metrics.verify_outcomes.labels("never_ran" if never_ran else "scored").inc()
    headers = {REPORT_HEADER: report_header({k: v for k, v in report.items() if k != "provenance"})}
    if typed:  # Gym's typed verify responses forbid extra keys: the report travels in a header
        return json_response(payload, upstream.status_code, headers)
    if never_ran:
        payload["mask_sample"] = True
    payload[BRIDGE_KEY] = report
    return json_response(payload, upstream.status_code, headers)


def report_header(report: Mapping[str, Any]) -> str:
    """The ``_bridge`` report as a header value: ASCII JSON (names a model emitted may be any
    text), and past ``REPORT_HEADER_LIMIT`` bytes only the counts."""
    text = json.dumps(report, ensure_ascii=True, separators=(",", ":"))
    if len(text) <= REPORT_HEADER_LIMIT:
        return text
    counts = {
        "normalized": len(report.get("normalized", {})),
        "unresolved": len(report.get("unresolved", [])),
        "recorded_tool_calls": report.get("recorded_tool_calls"),
        "agent_never_ran": report.get("agent_never_ran"),
        "truncated": True,
    }
    return json.dumps(counts, separators=(",", ":"))
