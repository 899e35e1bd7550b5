"""Gym's ``mcp_tool_call_provenance`` sidecar in a verify body: where it sits, what it claims, and
what of it the upstream gets.

Gym PR #2673 adds ``mcp_tool_call_provenance: {call_id: {server_name, tool_name}}`` to the verify
request model that holds ``response``; a harness adapter fills it from the harness's own record of
each MCP call. So it sits beside ``response``: at the top of a flat body, or inside a Gym >= 0.7
typed body's ``verification_input`` when that input carries the ``response``. The top of a typed body
(``ResourcesVerifyRequest``: ``episode_id``, ``task_id``, ``verification_input``) is read too; given
in two places it is refused.

Data flow: ``take`` removes it from the body (``Sidecar``: the claims, the value as sent, its place)
→ ``verify.normalize`` weighs each claim as evidence under the naming rules → the upstream gets, at
the same place, only what this bridge credited (``checked``) when its ``/verify`` request model
accepts the key there (``accepted_places``, read from its ``/openapi.json``: the model declares the
field or does not forbid extra keys), and nothing when it would refuse it (a 422 that scores
nothing). Never the caller's own claims: a Gym that reads the field renames calls by it, and would
score a call this bridge refused. A Gym that echoes the field gets the caller's value back
(``restore``), as names come back as emitted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

KEY = "mcp_tool_call_provenance"
TYPED_KEY = "verification_input"
BODY, TYPED_BODY, VERIFICATION_INPUT = "body", "typed_body", TYPED_KEY  # places it may sit
_PROBLEM = f"{KEY} must be an object mapping call ids to {{server_name, tool_name}} strings"
_SCHEMA_DEPTH = 8  # $ref/anyOf hops followed in the upstream's schema


@dataclass(frozen=True, slots=True)
class Sidecar:
    claims: dict[str, tuple[str, str]]  # call_id -> (server_name, tool_name)
    sent: Any  # the value as the caller sent it
    place: str  # BODY, TYPED_BODY or VERIFICATION_INPUT


def take(body: dict[str, Any]) -> Sidecar | None:
    """Remove the sidecar from ``body`` (a shallow copy the caller owns; a typed body's
    ``verification_input`` is copied before it changes). None when absent or null; ValueError
    (one line) when malformed or given twice."""
    typed = TYPED_KEY in body
    found: list[tuple[str, Any]] = []
    if KEY in body:
        found.append((TYPED_BODY if typed else BODY, body.pop(KEY)))
    inner = body.get(TYPED_KEY)
    if isinstance(inner, dict) and KEY in inner and "response" in inner:
        inner = dict(inner)
        found.append((VERIFICATION_INPUT, inner.pop(KEY)))
        body[TYPED_KEY] = inner
    found = [(place, value) for place, value in found if value is not None]
    if len(found) > 1:
        raise ValueError(f"{KEY} given twice: send it once, beside the response in {TYPED_KEY}")
    if not found:
        return None
    place, value = found[0]
    return Sidecar(_claims(value), value, place)


def _claims(value: Any) -> dict[str, tuple[str, str]]:
    if not isinstance(value, dict):
        raise ValueError(_PROBLEM)
    claims: dict[str, tuple[str, str]] = {}
    for call_id, entry in value.items():
        server = entry.get("server_name") if isinstance(entry, dict) else None
        tool = entry.get("tool_name") if isinstance(entry, dict) else None
        # Gym's MCPToolCallProvenance: both non-empty with a non-space character
        if not (isinstance(server, str) and server.strip() and isinstance(tool, str) and tool.strip()):
            raise ValueError(_PROBLEM)
        claims[call_id] = (server, tool)
    return claims


def checked(sidecar: Sidecar, credited: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """What the upstream may read: the claims this bridge credited (``credited``: call_id ->
    canonical tool), under the canonical name. A call left out is, to Gym, no MCP call."""
    return {
        call_id: {"server_name": sidecar.claims[call_id][0], "tool_name": tool}
        for call_id, tool in credited.items()
        if call_id in sidecar.claims
    }


def place_in(body: dict[str, Any], sidecar: Sidecar, value: Any) -> None:
    """Put ``value`` under the key at the sidecar's place in ``body`` (the body sent upstream)."""
    target = body.get(TYPED_KEY) if sidecar.place == VERIFICATION_INPUT else body
    if isinstance(target, dict):
        target[KEY] = value


def restore(payload: dict[str, Any], sidecar: Sidecar) -> None:
    """The caller's own value where the upstream's answer echoes the key."""
    target = payload.get(TYPED_KEY) if sidecar.place == VERIFICATION_INPUT else payload
    if isinstance(target, dict) and KEY in target:
        target[KEY] = sidecar.sent


# --------------------------------------------------------------------------------------------
# What the upstream's /verify accepts, from its /openapi.json
# --------------------------------------------------------------------------------------------


def accepted_places(spec: Mapping[str, Any]) -> frozenset[str]:
    """The places where the upstream's ``/verify`` request model takes the key (declares it, or
    does not forbid extra keys, as pydantic's ``extra="ignore"`` and ``"allow"`` do). Nothing when
    the route states no JSON body model: the key is then never sent."""
    operation = ((spec.get("paths") or {}).get("/verify") or {}).get("post") or {}
    content = ((operation.get("requestBody") or {}).get("content") or {}).get("application/json") or {}
    places: set[str] = set()
    for model in _objects(content.get("schema"), spec, _SCHEMA_DEPTH):
        properties = model.get("properties") or {}
        if TYPED_KEY not in properties:
            places.update([BODY] if _takes(model) else [])
            continue
        places.update([TYPED_BODY] if _takes(model) else [])
        if any(_takes(inner) for inner in _objects(properties[TYPED_KEY], spec, _SCHEMA_DEPTH)):
            places.add(VERIFICATION_INPUT)
    return frozenset(places)


def _takes(model: Mapping[str, Any]) -> bool:
    return KEY in (model.get("properties") or {}) or model.get("additionalProperties", True) is not False


def _objects(schema: Any, spec: Mapping[str, Any], depth: int) -> Iterator[Mapping[str, Any]]:
    """The object schemas ``schema`` may be: local ``$ref``s followed, ``anyOf``/``oneOf``/a
    one-item ``allOf`` expanded."""
    if not isinstance(schema, Mapping) or depth <= 0:
        return
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = spec
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        yield from _objects(target, spec, depth - 1)
        return
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if not alternatives and isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
        alternatives = schema["allOf"]
    if isinstance(alternatives, list):
        for alternative in alternatives:
            yield from _objects(alternative, spec, depth - 1)
        return
    if schema.get("type") == "object" or "properties" in schema:
        yield schema
