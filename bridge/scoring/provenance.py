"""Provenance of a scored trajectory: which of its tool calls this bridge really served.

``/verify`` hands this module the session id, the scored trajectory's function calls (canonical
names after normalization, arguments as the model sent them) and the session's call log. Each
trajectory call is matched, in order, to the first unclaimed logged call with the same canonical
tool and equal arguments (canonical JSON). A matched call gets ``served: true``, the digests of
its arguments and of the result the bridge served, and an HMAC-SHA256 under the signing key over
(session, call_id, tool, arguments digest, result digest); an unmatched one gets ``served: false``
and no MAC. The result is ``_bridge.provenance`` in the verify answer.

``check`` re-verifies a stored verify answer later, with the same key(s): every claimed MAC must
recompute, and each call's tool and arguments in the stored trajectory must still be the ones the
MAC covers. A trainer keeps only trajectories whose every call checks out as served.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.calllog import ToolCallRecord
from bridge.scoring.naming import canonical_arguments

FORMAT = "gym-mcp-bridge/provenance/v1"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_digest(arguments: Any) -> str | None:
    """SHA-256 of the arguments as canonical JSON (sorted keys); None when they are not JSON."""
    canonical = canonical_arguments(arguments)
    return digest(canonical) if canonical is not None else None


def mac(key: str, session: str, call_id: str, tool: str, arguments_sha256: str, result_sha256: str) -> str:
    message = "\n".join((FORMAT, session, call_id, tool, arguments_sha256, result_sha256)).encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class ScoredCall:
    """A function call of the scored trajectory: its id, canonical tool name and arguments."""

    call_id: str
    tool: str
    arguments: Any


def attest(
    session: str, calls: Sequence[ScoredCall], log: Sequence[ToolCallRecord], key: str
) -> dict[str, Any]:
    """``_bridge.provenance`` for the scored ``calls`` of ``session`` against its call ``log``."""
    unclaimed = [(record.canonical_name, arguments_digest(record.arguments), record) for record in log]
    entries: dict[str, Any] = {}
    for call in calls:
        wanted = arguments_digest(call.arguments)
        match = next(
            (
                i
                for i, (tool, args, _) in enumerate(unclaimed)
                if tool == call.tool and args == wanted and args
            ),
            None,
        )
        if match is None or wanted is None:
            entries[call.call_id] = {"served": False, "tool": call.tool}
            continue
        record = unclaimed.pop(match)[2]
        result = digest(record.output.encode())
        entries[call.call_id] = {
            "served": True,
            "tool": call.tool,
            "arguments_sha256": wanted,
            "result_sha256": result,
            "served_call_id": record.call_id,
            "mac": mac(key, session, call.call_id, call.tool, wanted, result),
        }
    return {"format": FORMAT, "session": session, "calls": entries}


@dataclass(frozen=True, slots=True)
class Verdict:
    call_id: str
    ok: bool
    reason: str


def check(stored: Mapping[str, Any], keys: Sequence[str]) -> list[Verdict]:
    """Re-check a stored verify answer (the upstream's body with ``response`` and ``_bridge``): one
    verdict per function call of its trajectory. ``ok`` only for a call the bridge served whose MAC
    recomputes under one of ``keys`` and whose tool and arguments are still those it covers."""
    report = stored.get("_bridge") if isinstance(stored, Mapping) else None
    proof = report.get("provenance") if isinstance(report, Mapping) else None
    if not isinstance(proof, Mapping) or proof.get("format") != FORMAT:
        raise ValueError(f"no {FORMAT} provenance in _bridge.provenance")
    session, claimed = str(proof.get("session", "")), proof.get("calls")
    if not isinstance(claimed, Mapping):
        raise ValueError("_bridge.provenance.calls is not an object")
    normalized = report.get("normalized", {}) if isinstance(report, Mapping) else {}
    response = stored.get("response")
    output = response.get("output") if isinstance(response, Mapping) else None
    verdicts = []
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, Mapping) or item.get("type") != "function_call":
            continue
        call_id, name = str(item.get("call_id")), str(item.get("name"))
        namespace = item.get("namespace")
        shown = f"{namespace}.{name}" if isinstance(namespace, str) else name
        tool = normalized.get(shown, name) if isinstance(normalized, Mapping) else name
        entry = claimed.get(call_id)
        verdicts.append(
            Verdict(call_id, *_check_entry(entry, session, call_id, tool, item.get("arguments"), keys))
        )
    return verdicts


def _check_entry(
    entry: Any, session: str, call_id: str, tool: str, arguments: Any, keys: Sequence[str]
) -> tuple[bool, str]:
    if not isinstance(entry, Mapping):
        return False, "no provenance for this call"
    if entry.get("served") is not True:
        return False, "not served by the bridge for this session"
    if entry.get("tool") != tool:
        return False, f"tool changed: provenance covers {entry.get('tool')!r}, the trajectory says {tool!r}"
    wanted = arguments_digest(arguments)
    if wanted is None or wanted != entry.get("arguments_sha256"):
        return False, "arguments changed since the call was served"
    result = str(entry.get("result_sha256", ""))
    claimed = str(entry.get("mac", ""))
    if not any(
        hmac.compare_digest(mac(key, session, call_id, tool, wanted, result), claimed) for key in keys
    ):
        return False, "MAC does not verify under the signing key(s)"
    return True, "served"
