"""``_bridge.provenance``: which calls of a scored trajectory the bridge really served for that
session, signed, and ``gym-mcp-bridge provenance check`` re-verifying a stored verify answer."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import BRIDGE, HEADER, ROOT, SECRET, BridgeProcess, counter_row, mcp_client

pytestmark = pytest.mark.anyio


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def response_of(*items: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "resp_provenance",
        "object": "response",
        "created_at": 0,
        "model": "provenance-test",
        "output": list(items),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def check(answer: Any, tmp_path: Path, secret: str = SECRET) -> subprocess.CompletedProcess[str]:
    stored = tmp_path / "answers.jsonl"
    answers = answer if isinstance(answer, list) else [answer]
    stored.write_text("".join(json.dumps(a) + "\n" for a in answers))
    env = {**os.environ, "GYM_MCP_BRIDGE_SECRET": secret}
    return subprocess.run(
        [*BRIDGE, "provenance", "check", str(stored)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def served_rollout(bridge: BridgeProcess) -> tuple[str, dict[str, Any]]:
    """A session whose harness called increment_counter(5) and get_counter_value over MCP, and the
    verify answer of a trajectory that claims those two calls plus one it never made."""
    token = bridge.seed(counter_row(1, 6))["mcp"]["headers"][HEADER]
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        await client.call_tool("increment_counter", {"count": 5})
        await client.call_tool("get_counter_value", {})
    trajectory = response_of(
        call("c1", "mcp__example_session_state_mgmt__increment_counter", {"count": 5}),
        call("c2", "get_counter_value", {}),
        call("c3", "increment_counter", {"count": 99}),  # in the trajectory, never served
    )
    answer = httpx.post(
        f"{bridge.url}/verify", json={"response": trajectory}, headers={HEADER: token}, timeout=60
    ).json()
    return token, answer


async def test_verify_says_which_calls_were_served_for_the_session(counter_bridge: BridgeProcess) -> None:
    _, answer = await served_rollout(counter_bridge)
    proof = answer["_bridge"]["provenance"]
    calls = proof["calls"]
    assert calls["c1"]["served"] is True and calls["c1"]["tool"] == "increment_counter"
    assert calls["c2"]["served"] is True and len(calls["c2"]["mac"]) == 64
    assert calls["c3"] == {"served": False, "tool": "increment_counter"}
    assert calls["c1"]["mac"] != calls["c2"]["mac"]


async def test_a_call_served_to_another_session_is_not_provenance(counter_bridge: BridgeProcess) -> None:
    other = counter_bridge.seed(counter_row(0))["mcp"]["headers"][HEADER]
    async with mcp_client(f"{counter_bridge.url}/mcp", other) as client:
        await client.call_tool("increment_counter", {"count": 5})
    mine = counter_bridge.seed(counter_row(0))["mcp"]["headers"][HEADER]
    answer = httpx.post(
        f"{counter_bridge.url}/verify",
        json={"response": response_of(call("c1", "increment_counter", {"count": 5}))},
        headers={HEADER: mine},
        timeout=60,
    ).json()
    assert answer["_bridge"]["provenance"]["calls"]["c1"]["served"] is False


async def test_provenance_check_accepts_served_calls_and_names_every_other(
    counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    _, answer = await served_rollout(counter_bridge)
    mixed = check(answer, tmp_path)
    assert mixed.returncode == 1, mixed.stderr
    lines = dict(
        (line.split("\t")[1], line.split("\t")[2:]) for line in mixed.stdout.splitlines() if "\t" in line
    )
    assert lines["c1"][0] == "ok" and lines["c2"][0] == "ok"
    assert lines["c3"] == ["FAIL", "not served by the bridge for this session"]

    clean = copy.deepcopy(answer)
    clean["response"]["output"] = clean["response"]["output"][:2]
    assert check(clean, tmp_path).returncode == 0

    tampered = copy.deepcopy(clean)
    tampered["response"]["output"][0]["arguments"] = json.dumps({"count": 6})
    out = check(tampered, tmp_path)
    assert out.returncode == 1 and "arguments changed" in out.stdout

    renamed = copy.deepcopy(clean)
    renamed["_bridge"]["provenance"]["calls"]["c2"]["tool"] = "increment_counter"
    renamed["response"]["output"][1]["name"] = "increment_counter"
    out = check(renamed, tmp_path)
    assert out.returncode == 1 and "MAC does not verify" in out.stdout

    forged_key = check(clean, tmp_path, secret="another-deployment-key-0123456789abcdef")
    assert forged_key.returncode == 1 and forged_key.stdout.count("MAC does not verify") == 2

    garbage = tmp_path / "garbage.json"
    garbage.write_text("{}")
    env = {**os.environ, "GYM_MCP_BRIDGE_SECRET": SECRET}
    bad = subprocess.run(
        [*BRIDGE, "provenance", "check", str(garbage)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "provenance" in bad.stderr


async def test_the_rollout_id_is_signed_whole_and_an_edit_of_it_fails_the_check(
    counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    """Seeded and verified under Gym 0.7's ``/ng-rollout/<id>/`` with a long id: the answer carries
    the id whole, ``provenance check`` passes, and fails once the stored id is edited. A verify under
    another rollout's prefix keeps the reward and says so, signed."""
    rollout = "r" * 5000 + "-a1"
    seeded = httpx.post(
        f"{counter_bridge.url}/ng-rollout/{rollout}/seed_session", json=counter_row(1, 6), timeout=30
    )
    token = seeded.json()["mcp"]["headers"][HEADER]
    async with mcp_client(f"{counter_bridge.url}/mcp", token) as client:
        await client.call_tool("increment_counter", {"count": 5})
    body = {"response": response_of(call("c1", "increment_counter", {"count": 5}))}
    verified = httpx.post(
        f"{counter_bridge.url}/ng-rollout/{rollout}/verify", json=body, headers={HEADER: token}, timeout=60
    ).json()
    proof = verified["_bridge"]["provenance"]
    assert proof["rollout_id"] == rollout and "verify_rollout_id" not in proof
    out = check(verified, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "(provenance)\tok" in out.stdout and len(out.stdout) < 2000  # the id labelled, not echoed whole

    edited = copy.deepcopy(verified)
    edited["_bridge"]["provenance"]["rollout_id"] = rollout.replace("-a1", "-a2")
    out = check(edited, tmp_path)
    assert out.returncode == 1 and "(provenance)\tFAIL" in out.stdout
    assert "\tc1\tok\t" in out.stdout  # the call itself is still the one served

    elsewhere = httpx.post(
        f"{counter_bridge.url}/ng-rollout/other-9/verify", json=body, headers={HEADER: token}, timeout=60
    ).json()
    assert elsewhere["reward"] == verified["reward"] == 1.0
    assert elsewhere["_bridge"]["provenance"]["rollout_id"] == rollout
    assert elsewhere["_bridge"]["provenance"]["verify_rollout_id"] == "other-9"
    assert check(elsewhere, tmp_path).returncode == 0
