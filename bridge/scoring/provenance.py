"""Provenance of a scored trajectory: which of its tool calls this bridge really served, for which
session, under which rollout id.

``/verify`` hands this module the session id, the rollout ids (the one the session was seeded under,
and the verify's own when it came under another), the scored trajectory's function calls (canonical
names after normalization, arguments as the model sent them) and the session's call log. Each
trajectory call is matched, in order, to the first unclaimed logged call with the same canonical
tool and equal arguments (canonical JSON). A matched call gets ``served: true``, the digests of
its arguments and of the result the bridge served, and an HMAC-SHA256 under the signing key over
(format, session, call_id, tool, arguments digest, result digest); an unmatched one gets
``served: false`` and no MAC. The whole object -- format, session, ``rollout_id``,
``verify_rollout_id``, every call entry -- is then signed once more (``mac``, the seal: HMAC over
its canonical JSON), so the rollout id is signed whole, together with the calls, and an answer
without calls still binds its session to its rollout id. The result is ``_bridge.provenance``.

What the rollout id proves: the bridge served this session's calls and seeded it under a
``/ng-rollout/<id>/`` prefix carrying that id (``verify_rollout_id``: the verify came under
another one; reported, never a reason to change the reward). It is a label the caller chose: it
does not prove that Gym assigned it, that the caller was Gym, or that no other session carries the
same id.

``check`` re-verifies a stored verify answer later, with the same key(s): the seal must recompute
(any edit of the session, the rollout ids or a call entry fails it), every claimed MAC must
recompute, and each call's tool and arguments in the stored trajectory must still be the ones the
MAC covers. A trainer keeps only trajectories whose every verdict is ok. Answers signed before the
seal existed (``FORMAT_V1``) are checked as they were signed (per-call MACs only) when they carry no
rollout id; one that does fails, since nothing signed it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.calllog import ToolCallRecord
from bridge.rollouts import label
from bridge.scoring.naming import canonical_arguments

FORMAT = "gym-mcp-bridge/provenance/v2"
FORMAT_V1 = "gym-mcp-bridge/provenance/v1"  # per-call MACs only, no seal; rollout_id unsigned
ROLLOUT_KEYS = ("rollout_id", "verify_rollout_id")
SEAL_VERDICT = "(provenance)"  # the call_id column of the seal's verdict


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_digest(arguments: Any) -> str | None:
    """SHA-256 of the arguments as canonical JSON (sorted keys); None when they are not JSON."""
    canonical = canonical_arguments(arguments)
    return digest(canonical) if canonical is not None else None


def mac(
    key: str,
    session: str,
    call_id: str,
    tool: str,
    arguments_sha256: str,
    result_sha256: str,
    version: str = FORMAT,
) -> str:
    """The MAC of one served call. ``version`` is part of the message, so a v2 call entry passed
    off as a v1 one (to shed the seal) does not verify."""
    message = "\n".join((version, session, call_id, tool, arguments_sha256, result_sha256)).encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def seal(key: str, proof: Mapping[str, Any]) -> str:
    """The MAC over the whole provenance object but its own ``mac``: canonical JSON (sorted keys,
    compact, ASCII), after a first line no per-call message starts with."""
    unsigned = {name: value for name, value in proof.items() if name != "mac"}
    canonical = json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    message = f"{FORMAT}/seal\n{canonical}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class ScoredCall:
    """A function call of the scored trajectory: its id, canonical tool name and arguments."""

    call_id: str
    tool: str
    arguments: Any


def scored_calls(items: Sequence[Mapping[str, Any]]) -> list[ScoredCall]:
    """The function-call items of a scored transcript as ``ScoredCall`` values."""
    return [
        ScoredCall(str(item.get("call_id")), str(item.get("name")), item.get("arguments")) for item in items
    ]


def attest(
    session: str,
    calls: Sequence[ScoredCall],
    log: Sequence[ToolCallRecord],
    key: str,
    rollout_id: str | None = None,
    verify_rollout_id: str | None = None,
) -> dict[str, Any]:
    """``_bridge.provenance`` for the scored ``calls`` of ``session`` against its call ``log``:
    ``rollout_id`` is the id the session was seeded under, ``verify_rollout_id`` the verify's own
    when it differs (both whole, both under the seal)."""
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
    proof: dict[str, Any] = {"format": FORMAT, "session": session}
    if rollout_id is not None:
        proof["rollout_id"] = rollout_id
    if verify_rollout_id is not None:
        proof["verify_rollout_id"] = verify_rollout_id
    proof["calls"] = entries
    proof["mac"] = seal(key, proof)
    return proof


@dataclass(frozen=True, slots=True)
class Verdict:
    call_id: str
    ok: bool
    reason: str


def check(stored: Mapping[str, Any], keys: Sequence[str]) -> list[Verdict]:
    """Re-check a stored verify answer (the upstream's body with ``response`` and ``_bridge``): the
    seal's verdict (``SEAL_VERDICT``: session and rollout ids as signed), then one verdict per
    function call of its trajectory, ``ok`` only for a call the bridge served whose MAC recomputes
    under one of ``keys`` and whose tool and arguments are still those it covers."""
    report = stored.get("_bridge") if isinstance(stored, Mapping) else None
    proof = report.get("provenance") if isinstance(report, Mapping) else None
    version = proof.get("format") if isinstance(proof, Mapping) else None
    if not isinstance(proof, Mapping) or version not in (FORMAT, FORMAT_V1):
        raise ValueError(f"no {FORMAT} (or v1) provenance in _bridge.provenance")
    session, claimed = str(proof.get("session", "")), proof.get("calls")
    if not isinstance(claimed, Mapping):
        raise ValueError("_bridge.provenance.calls is not an object")
    verdicts = [_check_seal(proof, keys)] if version == FORMAT else _check_v1(proof)
    normalized = report.get("normalized", {}) if isinstance(report, Mapping) else {}
    response = stored.get("response")
    output = response.get("output") if isinstance(response, Mapping) else None
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, Mapping) or item.get("type") != "function_call":
            continue
        call_id, name = str(item.get("call_id")), str(item.get("name"))
        namespace = item.get("namespace")
        shown = f"{namespace}.{name}" if isinstance(namespace, str) else name
        tool = normalized.get(shown, name) if isinstance(normalized, Mapping) else name
        entry = claimed.get(call_id)
        verdicts.append(
            Verdict(
                call_id,
                *_check_entry(entry, session, call_id, tool, item.get("arguments"), keys, str(version)),
            )
        )
    return verdicts


def _check_seal(proof: Mapping[str, Any], keys: Sequence[str]) -> Verdict:
    claimed = str(proof.get("mac", ""))
    if not any(_equal(seal(key, proof), claimed) for key in keys):
        return Verdict(
            SEAL_VERDICT,
            False,
            "the signature over the session, its rollout id and the call entries does not verify under "
            "the signing key(s): edited since /verify signed it, or signed by another deployment",
        )
    rollout = proof.get("rollout_id")
    said = f"rollout id {label(rollout)!r}" if isinstance(rollout, str) else "no rollout id"
    other = proof.get("verify_rollout_id")
    if isinstance(other, str):
        said += f", verified under rollout id {label(other)!r}"
    return Verdict(SEAL_VERDICT, True, f"session and {said} as signed")


def _check_v1(proof: Mapping[str, Any]) -> list[Verdict]:
    """A v1 answer's per-call MACs cover no rollout id: one it carries was never signed."""
    if not any(name in proof for name in ROLLOUT_KEYS):
        return []
    reason = (
        f"{FORMAT_V1} answer with a rollout id: its signature does not cover it (signed before rollout "
        "ids were); remove rollout_id to check the calls alone"
    )
    return [Verdict(SEAL_VERDICT, False, reason)]


def _check_entry(
    entry: Any,
    session: str,
    call_id: str,
    tool: str,
    arguments: Any,
    keys: Sequence[str],
    version: str,
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
    if not any(_equal(mac(key, session, call_id, tool, wanted, result, version), claimed) for key in keys):
        return False, "MAC does not verify under the signing key(s)"
    return True, "served"


def _equal(computed: str, claimed: str) -> bool:
    """Constant-time comparison that also takes a stored value with any characters (``compare_digest``
    refuses non-ASCII ``str``)."""
    return hmac.compare_digest(computed.encode(), claimed.encode("utf-8", "surrogatepass"))
