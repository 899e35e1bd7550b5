"""Verify as computation: a rollout made ready for the upstream's own ``/verify`` under canonical
tool names (``prepare``), and its answer given back under the caller's names (``finish``). The
service (``Bridge.verify``) sends it to the upstream and signs the provenance; the HTTP layer renders.

Data flow: the body (Gym row fields + ``response``, or ``trajectory``) and the session it names
(or none) → the Responses object (given, or converted by ``trajectory``) → the seeded row fills
in when the caller sent no row fields → a deep copy whose ``function_call`` names are resolved by
``naming`` against the session's tool names (or the body's own tools), on evidence only: the
known aliases of this server (its name, the ``server_aliases`` setting, ``_bridge.server_aliases``
in the body, stripped before forwarding) and those the session's own log proves, and Gym's
``mcp_tool_call_provenance`` weighed as evidence (``call_provenance``: the upstream gets only the
claims credited, where its model takes the key) → upstream
``/verify`` with the session's cookie → the upstream's answer, with names restored to what the
harness emitted (matched by ``call_id``) and ``_bridge`` added, with ``provenance`` (which calls
this bridge served for the session, signed; see ``provenance``). The bridge never computes a reward:
a rollout whose agent never ran is marked ``mask_sample: true``, a lost session never reaches the
upstream, and a ``recorded`` trajectory from an incomplete log is refused (409).
"""

from __future__ import annotations

import collections
import copy
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.calllog import ToolCallRecord
from bridge.scoring import call_provenance, harness, naming, trajectory
from bridge.scoring.call_provenance import KEY as PROVENANCE_KEY
from bridge.scoring.call_provenance import TYPED_KEY as TYPED_VERIFY_KEY

BRIDGE_KEY = "_bridge"
REPORT_HEADER = "x-gym-mcp-bridge"
REPORT_HEADER_LIMIT = 4096  # bytes of the report header; past it, counts only


def _declared_aliases(body: dict[str, Any]) -> list[str]:
    """``_bridge.server_aliases`` of a verify body, removed from it; VerifyRefused when malformed."""
    extra = body.pop(BRIDGE_KEY, None)
    if extra is None:
        return []
    aliases = extra.get("server_aliases", []) if isinstance(extra, dict) else None
    if not isinstance(aliases, list) or not all(isinstance(a, str) and 0 < len(a) <= 128 for a in aliases):
        raise VerifyRefused(
            f"{BRIDGE_KEY} must be an object whose server_aliases is a list of names (1-128 characters)"
        )
    return aliases


def _known_names(
    session_tools: tuple[str, ...] | None, body: Mapping[str, Any], upstream_tools: Collection[str]
) -> Collection[str]:
    if session_tools is not None:
        return session_tools
    return _body_tool_names(body) or upstream_tools


def _body_tool_names(body: Mapping[str, Any]) -> list[str]:
    """The function tools a body declares, in either shape a row may use (as ``tools.from_row``
    reads them): Responses ``{"type": "function", "name"}`` or chat ``{"function": {"name"}}``."""
    params = body.get("responses_create_params")
    tools = params.get("tools") if isinstance(params, dict) else None
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        wrapped = tool.get("function")
        name = (wrapped if isinstance(wrapped, dict) else tool).get("name")
        if isinstance(name, str) and name:
            names.append(name)
    return names


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
    harness_tools: list[dict[str, Any]] = field(default_factory=list)  # {"name", "clients"[, "reason"]}
    emitted_by_call: dict[str, str] = field(default_factory=dict)  # call_id -> emitted name
    namespaces: dict[str, str] = field(default_factory=dict)  # call_id -> emitted namespace
    conventions: list[str] = field(default_factory=list)  # one per renamed call
    proven_aliases: list[str] = field(default_factory=list)
    # {"given", "confirmed"[, "forwarded"]} when the body had Gym's mcp_tool_call_provenance
    provenance: dict[str, Any] | None = None
    credited_claims: dict[str, str] = field(default_factory=dict)  # call_id -> tool, for claims credited


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


@dataclass
class _Call:
    """What ``normalize`` decided for one function call of the trajectory."""

    item: dict[str, Any]
    emitted: str
    namespace: str | None
    arguments: bytes | None
    canonical: str | None
    convention: str | None
    reason: str | None
    clients: list[str]  # harness clients whose own tools include this name
    claimed: tuple[str, str] | None = None  # provenance (server, tool) still to prove from the log

    @property
    def shown(self) -> str:
        return f"{self.namespace}.{self.emitted}" if self.namespace else self.emitted

    @property
    def guarded(self) -> bool:
        """A harness tool's bare name credited to the session tool of that name: needs the record."""
        return bool(self.clients) and self.namespace is None and self.canonical == self.emitted


def _decide(
    item: dict[str, Any],
    known: Collection[str],
    trusted: Collection[str],
    provenance: Mapping[str, tuple[str, str]] | None,
) -> _Call | None:
    emitted = item.get("name")
    if not isinstance(emitted, str):
        return None
    namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
    result = naming.resolve(emitted, known, trusted, namespace=namespace)
    call = _Call(
        item,
        emitted,
        namespace,
        naming.canonical_arguments(item.get("arguments")),
        result.canonical,
        result.convention,
        result.reason,
        harness.clients_of(emitted, namespace),
    )
    call_id = item.get("call_id")
    claim = provenance.get(call_id) if provenance is not None and isinstance(call_id, str) else None
    if claim is None:
        return call
    server, tool = claim
    if tool not in known:
        call.canonical, call.reason = None, f"provenance names {server}/{tool}: no tool of this session"
    elif call.canonical is not None and call.canonical != tool:
        call.canonical = None
        call.reason = f"provenance names {server}/{tool}, the name resolves to {result.canonical}"
    elif (
        result.reason == naming.UNKNOWN_ALIAS
        and naming.resolve(emitted, known, [server], namespace).canonical != tool
    ):
        call.reason = f"provenance names {server}/{tool}, the name names another server"
    elif server not in trusted or call.canonical != tool:  # only this session's served call proves it
        call.canonical, call.claimed = None, claim
    return call


def normalize(
    response: dict[str, Any],
    known: Collection[str],
    aliases: Collection[str],
    served: Collection[tuple[str, bytes | None]] = (),
    provenance: Mapping[str, tuple[str, str]] | None = None,
) -> NameReport:
    """Rename ``response``'s function calls in place to canonical names, on the evidence of the known
    ``aliases``, of the calls the session ``served`` (canonical name, canonical arguments) and of
    Gym's per-call ``provenance`` (call_id -> (server, tool)), which refutes a call, confirms what
    its name says, and credits anything more (a name no rule explains, a server no alias names)
    only with a served call (same tool and arguments) left for it. A harness tool's bare name that
    is also a session tool is credited only with a served call left for it too."""
    report = NameReport()
    proven = naming.prove_aliases(_emitted_calls(response), known, aliases, served) if served else set()
    trusted = {*aliases, *proven}
    calls = [
        c for c in (_decide(i, known, trusted, provenance) for i in trajectory.function_calls(response)) if c
    ]
    remaining = collections.Counter(served)
    for call in calls:  # calls credited on their own take their served call first
        if (
            call.canonical is not None
            and not call.guarded
            and remaining[(call.canonical, call.arguments)] > 0
        ):
            remaining[(call.canonical, call.arguments)] -= 1
    for call in calls:
        if call.claimed is not None:
            server, tool = call.claimed
            if remaining[(tool, call.arguments)] <= 0:
                call.reason = (
                    f"provenance names server {server!r}: no known alias, no recorded call"
                    if server not in trusted
                    else f"provenance names {server}/{tool}: no call the session served proves it"
                )
                continue
            remaining[(tool, call.arguments)] -= 1
            if server not in trusted:  # the log proves this server as it proves a name's
                trusted.add(server)
                proven.add(server)
            call.canonical, call.convention = tool, call.convention or "provenance"
        elif call.guarded:
            if remaining[(call.emitted, call.arguments)] > 0:
                remaining[(call.emitted, call.arguments)] -= 1
            else:
                call.canonical = None
                call.reason = "also a tool of this session; no call the session served proves it"
    report.proven_aliases = sorted(proven)
    if provenance is not None:
        report.credited_claims = {
            c.item["call_id"]: c.canonical
            for c in calls
            if c.canonical is not None and c.item.get("call_id") in provenance
        }
        report.provenance = {"given": len(provenance), "confirmed": len(report.credited_claims)}
    for call in calls:
        _apply(call, known, report)
    return report


def _apply(call: _Call, known: Collection[str], report: NameReport) -> None:
    """Rename ``call.item`` for the upstream and note it in ``report``."""
    item, emitted, namespace = call.item, call.emitted, call.namespace
    call_id = item.get("call_id")
    if call.canonical is None:
        if call.clients:
            entry: dict[str, Any] = {"name": call.shown, "clients": call.clients}
            if call.reason is not None and (call.guarded or emitted in known):
                entry["reason"] = call.reason
            if entry not in report.harness_tools:
                report.harness_tools.append(entry)
        else:
            unresolved = {"name": call.shown, "reason": call.reason or naming.UNKNOWN_TOOL}
            if unresolved not in report.unresolved:
                report.unresolved.append(unresolved)
        if namespace is None and emitted not in known:
            return
        # Gym reads only ``name``: a namespace item kept as emitted, or a bare name this verify
        # refused to credit, would be scored as the session tool it spells. Gym gets a name no
        # tool can have instead (the flat Codex name, or one with ":"); the caller's names come back.
        if isinstance(call_id, str):
            report.emitted_by_call[call_id] = emitted
            if namespace is not None:
                report.namespaces[call_id] = namespace
        flat = naming.flat_name(emitted, namespace)
        item["name"] = flat if flat not in known else f"unscored:{flat}"
        item.pop("namespace", None)
        return
    if call.canonical == emitted and namespace is None:
        return
    report.normalized[call.shown] = call.canonical
    report.conventions.append(call.convention or "exact")
    if isinstance(call_id, str):
        report.emitted_by_call[call_id] = emitted
        if namespace is not None:
            report.namespaces[call_id] = namespace
    item["name"] = call.canonical
    item.pop("namespace", None)


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


class VerifyRefused(ValueError):
    """A verify body that cannot be scored; ``kind`` says why (``verify_body``, ``log_incomplete``)."""

    def __init__(self, reason: str, kind: str = "verify_body") -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class SessionView:
    """What verify reads of a session: its row, the calls it served, and whether its log is whole."""

    row: dict[str, Any]
    calls: list[ToolCallRecord]
    calls_served: int  # logged or not
    tool_names: tuple[str, ...]
    incomplete_reason: str | None


@dataclass
class Prepared:
    """A verify body made ready for the upstream: ``scoring`` (canonical names) and what to report."""

    scoring: dict[str, Any]
    response: dict[str, Any]
    names: NameReport
    typed: bool
    never_ran: bool
    recorded_calls: int
    sidecar: call_provenance.Sidecar | None = None  # Gym's mcp_tool_call_provenance, as sent


def prepare(
    body: dict[str, Any],
    session: SessionView | None,
    aliases: Collection[str],
    upstream_tools: Collection[str],
    provenance_places: Collection[str] = (),
) -> Prepared:
    """The body to forward to the upstream's ``/verify``, names resolved on evidence only.

    ``aliases``: the server's known names (``_bridge.server_aliases`` of the body is added, then
    stripped); ``upstream_tools``: the names to resolve against when there is no session and the
    body names no tools; ``provenance_places``: where the upstream's request model takes Gym's
    ``mcp_tool_call_provenance`` (``call_provenance.accepted_places``): there it gets the claims this
    bridge credited, elsewhere nothing. Raises ``VerifyRefused``."""
    body = dict(body)
    raw_trajectory = body.pop("trajectory", None)
    if raw_trajectory is not None:
        if "response" in body:
            raise VerifyRefused("give either response or trajectory, not both")
        if isinstance(raw_trajectory, dict) and raw_trajectory.get("format") == "recorded":
            if session is None:
                raise VerifyRefused(
                    "trajectory format 'recorded' needs a session: send the session token header"
                )
            if session.incomplete_reason is not None:  # never a reward from part of a rollout
                raise VerifyRefused(session.incomplete_reason, "log_incomplete")
        try:
            body["response"] = trajectory.from_trajectory(raw_trajectory, session.calls if session else [])
        except trajectory.TrajectoryError as exc:
            raise VerifyRefused(f"invalid trajectory: {exc}") from exc
    declared = _declared_aliases(body)
    try:
        sidecar = call_provenance.take(body)
    except ValueError as exc:
        raise VerifyRefused(str(exc)) from exc
    typed = TYPED_VERIFY_KEY in body
    if session is not None and not typed and not (set(body) - {"response"}):
        body = {**session.row, **body}
    scoring = copy.deepcopy(body)
    slot = _response_slot(scoring)
    if slot is None and not typed:
        raise VerifyRefused("verify needs a 'response' (Responses object) or a 'trajectory'")
    response = slot["response"] if slot is not None else {}
    served = (
        [(c.canonical_name, naming.canonical_arguments(c.arguments)) for c in session.calls]
        if session is not None
        else []
    )
    known = _known_names(session.tool_names if session else None, scoring, upstream_tools)
    claims = sidecar.claims if sidecar is not None else None
    names = normalize(response, known, {*aliases, *declared}, served, claims)
    if sidecar is not None and names.provenance is not None:
        forwarded = sidecar.place in provenance_places
        if forwarded:
            call_provenance.place_in(
                scoring, sidecar, call_provenance.checked(sidecar, names.credited_claims)
            )
        names.provenance["forwarded"] = forwarded
    recorded = session.calls_served if session is not None else 0
    never_ran = agent_never_ran(response, recorded)
    return Prepared(scoring, response, names, typed, never_ran, recorded, sidecar)


def finish(prepared: Prepared, payload: dict[str, Any], signed_calls: Any) -> tuple[dict[str, Any], str]:
    """The upstream's verify answer with the caller's names restored and the ``_bridge`` report
    (``provenance`` = ``signed_calls`` when there was a session), and the report header."""
    names = prepared.names
    report: dict[str, Any] = {
        "normalized": names.normalized,
        "unresolved": names.unresolved,
        "harness_tools": names.harness_tools,
        "proven_aliases": names.proven_aliases,
        "recorded_tool_calls": prepared.recorded_calls,
        "agent_never_ran": prepared.never_ran,
    }
    if names.provenance is not None:
        report[PROVENANCE_KEY] = names.provenance
    header = report_header(report)
    if signed_calls is not None:
        report["provenance"] = signed_calls
    _restore_names(payload, names)
    if prepared.sidecar is not None:
        call_provenance.restore(payload, prepared.sidecar)
    if not prepared.typed:  # Gym's typed verify responses forbid extra keys: the header carries it
        if prepared.never_ran:
            payload["mask_sample"] = True
        payload[BRIDGE_KEY] = report
    return payload, header


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
    if PROVENANCE_KEY in report:  # counts already
        counts[PROVENANCE_KEY] = report[PROVENANCE_KEY]
    return json.dumps(counts, separators=(",", ":"))
