"""``bridge.scoring.provenance`` without processes: the seal puts the session and its rollout id
under the signature, whole, together with the call entries; answers signed before the seal existed
still check when they carry no rollout id.

``tests/fixtures/provenance/v1_answer*.json`` were signed by this project's ``attest`` as it was
before the seal (format ``gym-mcp-bridge/provenance/v1``) under ``tests/fixtures/bridges.py``'s ``SECRET``;
the ``_with_rollout_id`` one carries the unsigned ``rollout_id`` that version added beside the MACs.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bridge.calllog import ToolCallRecord
from bridge.scoring import provenance
from tests.fixtures.bridges import ROOT, SECRET

FIXTURES = ROOT / "tests" / "fixtures" / "provenance"
SESSION = "5d1c0e8b7a6f4e3d9c2b1a0f8e7d6c5b"
LOG = [
    ToolCallRecord("srv_1", "increment_counter", "increment_counter", {"count": 5}, '{"ok":1}', False, 0, 0),
    ToolCallRecord("srv_2", "get_counter_value", "get_counter_value", {}, '{"count":6}', False, 0, 0),
]
OUTPUT = [
    {"type": "function_call", "call_id": "c1", "name": "increment_counter", "arguments": '{"count": 5}'},
    {"type": "function_call", "call_id": "c2", "name": "get_counter_value", "arguments": "{}"},
]


def answer(rollout_id: str | None = None, verify_rollout_id: str | None = None) -> dict[str, Any]:
    """A stored verify answer as ``/verify`` returns it, both calls served."""
    scored = [provenance.ScoredCall(i["call_id"], i["name"], i["arguments"]) for i in OUTPUT]
    proof = provenance.attest(SESSION, scored, LOG, SECRET, rollout_id, verify_rollout_id)
    return {"reward": 1.0, "response": {"output": copy.deepcopy(OUTPUT)}, "_bridge": {"provenance": proof}}


def verdicts(stored: dict[str, Any], keys: tuple[str, ...] = (SECRET,)) -> dict[str, tuple[bool, str]]:
    # through JSON, as a stored answer is read back
    return {v.call_id: (v.ok, v.reason) for v in provenance.check(json.loads(json.dumps(stored)), keys)}


def failed(stored: dict[str, Any]) -> dict[str, str]:
    return {call_id: reason for call_id, (ok, reason) in verdicts(stored).items() if not ok}


@pytest.mark.parametrize("rollout_id", [None, "7-3", "r" * 65_000, "r" * 100_000 + ".z_-9"])
def test_a_fresh_answer_checks_with_its_rollout_id_signed_whole(rollout_id: str | None) -> None:
    stored = answer(rollout_id)
    proof = stored["_bridge"]["provenance"]
    assert proof["format"] == provenance.FORMAT
    assert proof.get("rollout_id") == rollout_id  # whole, never the log label
    assert failed(stored) == {}
    assert set(verdicts(stored)) == {provenance.SEAL_VERDICT, "c1", "c2"}


@pytest.mark.parametrize("rollout_id", ["7-3", "r" * 100_000])
def test_editing_the_rollout_id_fails_the_check(rollout_id: str) -> None:
    for edit in (rollout_id + "x", rollout_id[:-1] + "Q", "8-1", rollout_id[:-1]):
        stored = answer(rollout_id)
        stored["_bridge"]["provenance"]["rollout_id"] = edit
        assert list(failed(stored)) == [provenance.SEAL_VERDICT]
    removed = answer(rollout_id)
    del removed["_bridge"]["provenance"]["rollout_id"]
    assert list(failed(removed)) == [provenance.SEAL_VERDICT]


def test_adding_a_rollout_id_or_a_verify_rollout_id_fails_the_check() -> None:
    added = answer()
    added["_bridge"]["provenance"]["rollout_id"] = "7-3"
    assert list(failed(added)) == [provenance.SEAL_VERDICT]
    other = answer("7-3")
    other["_bridge"]["provenance"]["verify_rollout_id"] = "9-9"
    assert list(failed(other)) == [provenance.SEAL_VERDICT]


def test_a_verify_under_another_rollout_id_is_signed_and_said() -> None:
    stored = answer("7-3", "9-9")
    assert failed(stored) == {}
    ok, reason = verdicts(stored)[provenance.SEAL_VERDICT]
    assert ok and "'7-3'" in reason and "'9-9'" in reason
    stored["_bridge"]["provenance"]["verify_rollout_id"] = "7-3"  # hiding the mismatch
    assert list(failed(stored)) == [provenance.SEAL_VERDICT]


def test_a_long_rollout_id_is_labelled_in_the_verdict_line() -> None:
    ok, reason = verdicts(answer("r" * 100_000))[provenance.SEAL_VERDICT]
    assert ok and len(reason) < 300 and "100000 chars, sha256:" in reason


def test_a_call_entry_moved_between_answers_or_edited_fails_the_seal_too() -> None:
    stored = answer("7-3")
    stored["_bridge"]["provenance"]["calls"]["c9"] = {"served": False, "tool": "x"}
    assert list(failed(stored)) == [provenance.SEAL_VERDICT]
    stored = answer("7-3")
    stored["_bridge"]["provenance"]["session"] = "another-session"
    assert set(failed(stored)) == {provenance.SEAL_VERDICT, "c1", "c2"}


def test_another_key_fails_everything_and_a_rotated_key_list_checks() -> None:
    stored = answer("7-3")
    assert not any(ok for ok, _ in verdicts(stored, ("another-key-0123456789abcdef0123",)).values())
    assert all(ok for ok, _ in verdicts(stored, ("new-key-0123456789abcdef01234567", SECRET)).values())


def test_a_non_ascii_mac_is_a_failed_verdict_not_a_crash() -> None:
    stored = answer("7-3")
    stored["_bridge"]["provenance"]["mac"] = "é" * 64
    stored["_bridge"]["provenance"]["calls"]["c1"]["mac"] = "\ud800"
    assert set(failed(stored)) == {provenance.SEAL_VERDICT, "c1"}


def test_an_answer_signed_before_the_seal_still_checks() -> None:
    stored = json.loads((FIXTURES / "v1_answer.json").read_text())
    assert stored["_bridge"]["provenance"]["format"] == "gym-mcp-bridge/provenance/v1"
    assert verdicts(stored) == {"c1": (True, "served"), "c2": (True, "served")}
    stored["response"]["output"][0]["arguments"] = '{"count": 6}'
    assert failed(stored) == {"c1": "arguments changed since the call was served"}


def test_a_pre_seal_answer_with_a_rollout_id_fails_its_id_was_never_signed() -> None:
    stored = json.loads((FIXTURES / "v1_answer_with_rollout_id.json").read_text())
    assert list(failed(stored)) == [provenance.SEAL_VERDICT]
    assert "remove rollout_id" in failed(stored)[provenance.SEAL_VERDICT]
    del stored["_bridge"]["provenance"]["rollout_id"]
    assert failed(stored) == {}


def test_a_sealed_answer_passed_off_as_pre_seal_fails() -> None:
    """Relabelling a v2 answer v1 and dropping its seal (to edit the rollout id freely) does not
    pass: the per-call MACs name their format."""
    stored = answer("7-3")
    proof = stored["_bridge"]["provenance"]
    proof["format"] = "gym-mcp-bridge/provenance/v1"
    del proof["mac"], proof["rollout_id"]
    assert set(failed(stored)) == {"c1", "c2"}
