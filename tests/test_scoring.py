"""Scoring fidelity against real Gym servers: names as harnesses emit them score like canonical ones,
trajectories convert, never-ran is masked, lost sessions are refused, and replay reproduces rewards."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.scoring import naming
from tests.fixtures.bridges import (
    GYM_SITE,
    HEADER,
    ROOT,
    BridgeProcess,
    counter_row,
    gym_data,
    mcp_client,
    running_bridge,
)
from tests.fixtures.helpers import gym_response

pytestmark = pytest.mark.anyio
DATA = GYM_SITE / "resources_servers" if GYM_SITE else Path("/nonexistent")
CONVENTIONS = [
    "bare",
    "claude-code",
    "claude-plugin",
    "codex",
    "gemini",
    "agents-sdk",
    "goose",
    "opencode",
    "contextforge",
]


@pytest.fixture(scope="module")
def multi_step(log_dir: Path) -> Any:
    with running_bridge(log_dir, "--resources-server", "example_multi_step") as bridge:
        yield bridge


@pytest.fixture(scope="module")
def workplace(log_dir: Path) -> Any:
    bridge = BridgeProcess(
        args=["--resources-server", "workplace_assistant", "--server-aliases", "workplace"]
    ).start(log_dir)
    yield bridge
    bridge.stop()


def multi_step_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """The first shipped example_multi_step rollout and its row (joined by prompt)."""
    rollout = gym_data("example_multi_step", "example_rollouts.jsonl")[0]
    row = next(
        r
        for r in gym_data("example_multi_step")
        if r["responses_create_params"]["input"][-1]["content"]
        == rollout["responses_create_params"]["input"][-1]["content"]
    )
    return rollout, row


def rename(response: dict[str, Any], convention: str, server: str) -> dict[str, Any]:
    renamed = copy.deepcopy(response)
    for item in renamed["output"]:
        if item.get("type") == "function_call":
            item["name"] = naming.render(item["name"], server, convention)
    return renamed


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_multi_step_scores_1_for_every_convention_and_echoes_names_as_emitted(
    multi_step: BridgeProcess, convention: str
) -> None:
    rollout, row = multi_step_pair()
    seed = multi_step.seed(row)
    name = seed["mcp"]["server_name"]  # the name client-config and Gym's own agents configure
    server = f"gym:{name}" if convention == "claude-plugin" else name
    response = rename(rollout["response"], convention, server)
    emitted = [i["name"] for i in response["output"] if i.get("type") == "function_call"]
    body: dict[str, Any] = {"response": response}
    if convention == "claude-plugin":  # the plugin's server part is an alias the caller declares
        body["_bridge"] = {"server_aliases": [f"plugin:gym:{name}"]}
    verdict = httpx.post(
        f"{multi_step.url}/verify", json=body, headers=seed["mcp"]["headers"], timeout=60
    ).json()
    assert verdict["reward"] == 1.0, verdict
    echoed = [i["name"] for i in verdict["response"]["output"] if i.get("type") == "function_call"]
    assert echoed == emitted, "the stored rollout must keep the names as the harness emitted them"
    report = verdict["_bridge"]
    assert report["unresolved"] == []
    if convention == "bare":
        assert report["normalized"] == {}
    else:
        assert report["normalized"][emitted[-1]] == "extract_synonym_values"


def test_unknown_name_is_reported_unresolved_and_scores_0(multi_step: BridgeProcess) -> None:
    rollout, row = multi_step_pair()
    seed = multi_step.seed(row)
    response = copy.deepcopy(rollout["response"])
    for item in response["output"]:
        if item.get("name") == "extract_synonym_values":
            item["name"] = "mcp__synonyms__submit_values"
    verdict = httpx.post(
        f"{multi_step.url}/verify", json={"response": response}, headers=seed["mcp"]["headers"]
    ).json()
    assert verdict["_bridge"]["unresolved"] == [
        {"name": "mcp__synonyms__submit_values", "reason": "unknown tool"}
    ]
    assert verdict["reward"] == 0.0


@pytest.mark.parametrize("convention", ["claude-code", "codex", "gemini", "agents-sdk", "goose", "opencode"])
def test_a_server_name_with_no_evidence_scores_as_gym_scores_it(
    multi_step: BridgeProcess, convention: str
) -> None:
    """Names under a server part the bridge has no evidence for (not the seeded name, not declared,
    not proven by the session's log) stay as emitted: Gym scores them 0.0, natively and bridged."""
    rollout, row = multi_step_pair()
    seed = multi_step.seed(row)
    response = rename(rollout["response"], convention, "filesystem")
    verdict = httpx.post(
        f"{multi_step.url}/verify", json={"response": response}, headers=seed["mcp"]["headers"], timeout=60
    ).json()
    assert verdict["reward"] == 0.0
    reasons = {u["reason"] for u in verdict["_bridge"]["unresolved"]}
    assert reasons == {"unknown server alias"}, verdict["_bridge"]
    upstream = multi_step.health()["upstream"]["url"]
    with httpx.Client(base_url=upstream) as native:
        native.post("/seed_session", json=row).raise_for_status()
        assert native.post("/verify", json={**row, "response": response}).json()["reward"] == 0.0


def test_an_alias_declared_in_the_verify_body_is_trusted(multi_step: BridgeProcess) -> None:
    rollout, row = multi_step_pair()
    seed = multi_step.seed(row)
    response = rename(rollout["response"], "claude-code", "synonyms")
    headers = seed["mcp"]["headers"]
    plain = httpx.post(f"{multi_step.url}/verify", json={"response": response}, headers=headers, timeout=60)
    assert plain.json()["reward"] == 0.0
    body = {"response": response, "_bridge": {"server_aliases": ["synonyms"]}}
    declared = httpx.post(f"{multi_step.url}/verify", json=body, headers=headers, timeout=60).json()
    assert declared["reward"] == 1.0 and declared["_bridge"]["unresolved"] == []
    bad = httpx.post(
        f"{multi_step.url}/verify", json={**body, "_bridge": {"server_aliases": "synonyms"}}, headers=headers
    )
    assert bad.status_code == 400 and "server_aliases" in bad.json()["detail"]


async def test_an_alias_is_proven_by_the_sessions_own_mcp_calls(counter_bridge: BridgeProcess) -> None:
    """The harness named the server "my-harness-env" (the bridge was never told): its calls went
    through the bridge with the same arguments, so the log proves the alias; a call the bridge
    never served with those arguments, under a foreign server, proves nothing."""
    seed = counter_bridge.seed(counter_row(2, 7))
    token = seed["mcp"]["headers"][HEADER]
    async with mcp_client(f"{counter_bridge.url}/mcp", token) as client:
        await client.call_tool("increment_counter", {"count": 5})
        await client.call_tool("get_counter_value", {})

    def fc(call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }

    output = [
        fc("c1", "mcp__my-harness-env__increment_counter", '{"count": 5}'),
        fc("c2", "mcp__my-harness-env__get_counter_value", "{}"),
        fc("c3", "mcp__other__increment_counter", '{"count": 5}'),
    ]
    response = {**gym_response(), "output": output}
    verdict = httpx.post(
        f"{counter_bridge.url}/verify", json={"response": response}, headers={HEADER: token}, timeout=60
    ).json()
    report = verdict["_bridge"]
    assert report["proven_aliases"] == ["my-harness-env"]
    assert report["normalized"] == {
        "mcp__my-harness-env__increment_counter": "increment_counter",
        "mcp__my-harness-env__get_counter_value": "get_counter_value",
    }
    assert report["unresolved"] == [
        {"name": "mcp__other__increment_counter", "reason": "unknown server alias"}
    ]


def test_without_normalization_the_same_rollout_would_score_0(multi_step: BridgeProcess) -> None:
    """The control: Gym's own /verify, reached directly with the harness's names, gives 0."""
    rollout, row = multi_step_pair()
    upstream = multi_step.health()["upstream"]["url"]
    response = rename(rollout["response"], "claude-code", "synonyms")
    with httpx.Client(base_url=upstream) as native:
        native.post("/seed_session", json=row).raise_for_status()
        assert native.post("/verify", json={**row, "response": response}).json()["reward"] == 0.0


def test_sessionless_verify_normalizes_against_the_body_tools(workplace: BridgeProcess) -> None:
    """No session: the body's own tools, and the aliases of the --server-aliases setting."""
    row = gym_data("workplace_assistant")[0]
    output = [
        {
            "type": "function_call",
            "call_id": f"c{i}",
            "name": f"mcp_workplace_{c['name']}",
            "arguments": c["arguments"],
            "status": "completed",
        }
        for i, c in enumerate(row["ground_truth"])
    ]
    response = {**gym_response(), "output": output}
    verdict = httpx.post(f"{workplace.url}/verify", json={**row, "response": response}, timeout=60).json()
    assert verdict["reward"] == 1.0, verdict.get("_bridge")
    assert verdict["_bridge"]["recorded_tool_calls"] == 0
    assert sorted(verdict["_bridge"]["normalized"].values()) == sorted(
        {c["name"] for c in row["ground_truth"]}
    )


def test_codex_namespaced_items_resolve(multi_step: BridgeProcess) -> None:
    rollout, row = multi_step_pair()
    response = copy.deepcopy(rollout["response"])
    for item in response["output"]:
        if item.get("type") == "function_call":
            item["namespace"] = "mcp__example_multi_step"
    seed = multi_step.seed(row)
    verdict = httpx.post(
        f"{multi_step.url}/verify", json={"response": response}, headers=seed["mcp"]["headers"]
    ).json()
    assert verdict["reward"] == 1.0
    calls = [i for i in verdict["response"]["output"] if i.get("type") == "function_call"]
    assert all(i["namespace"] == "mcp__example_multi_step" for i in calls), "namespaces are echoed as emitted"


@pytest.mark.parametrize("namespace", ["mcp__filesystem", "mcp__example_multi_step_0123456789ab", "mcp__"])
def test_a_call_in_a_foreign_namespace_never_scores_as_the_bare_tool(
    multi_step: BridgeProcess, namespace: str
) -> None:
    """A Codex namespace item names its server in ``namespace`` and the tool bare in ``name``; Gym
    reads only ``name``. A call in a namespace that is no alias of this server is unresolved, and
    must reach Gym under a name no tool has: the same rollout Gym scores 1.0 with our namespace
    (test above) scores what no calls score natively (0.0), and the caller gets its names back."""
    rollout, row = multi_step_pair()
    response = copy.deepcopy(rollout["response"])
    for item in response["output"]:
        if item.get("type") == "function_call":
            item["namespace"] = namespace
    upstream = multi_step.health()["upstream"]["url"]
    no_calls = {**response, "output": [i for i in response["output"] if i.get("type") == "message"]}
    with httpx.Client(base_url=upstream) as native:
        native.post("/seed_session", json=row).raise_for_status()
        natively = native.post("/verify", json={**row, "response": no_calls}).json()["reward"]
    seed = multi_step.seed(row)
    verdict = httpx.post(
        f"{multi_step.url}/verify", json={"response": response}, headers=seed["mcp"]["headers"]
    ).json()
    assert verdict["reward"] == natively == 0.0
    calls = [i for i in verdict["response"]["output"] if i.get("type") == "function_call"]
    assert calls and all(i["namespace"] == namespace for i in calls)
    assert [i["name"] for i in calls] == [
        i["name"] for i in rollout["response"]["output"] if i.get("type") == "function_call"
    ]
    assert {u["name"].split(".", 1)[0] for u in verdict["_bridge"]["unresolved"]} == {namespace}


async def test_openai_chat_and_anthropic_trajectories_score_the_counter(
    counter_bridge: BridgeProcess,
) -> None:
    for fmt in ("openai-chat", "anthropic"):
        seed = counter_bridge.seed(counter_row(3, expected=6))
        token = seed["mcp"]["headers"][HEADER]
        async with mcp_client(seed["mcp"]["url"], token) as client:
            await client.call_tool("increment_counter", {"count": 1})
            await client.call_tool("increment_counter", {"count": 2})
        name = "mcp__counter__increment_counter"
        if fmt == "openai-chat":
            messages: list[dict[str, Any]] = [
                {"role": "user", "content": "add 1 then add 2"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": name, "arguments": '{"count": 1}'},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": name, "arguments": '{"count": 2}'},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": '{"success": true}'},
                {"role": "tool", "tool_call_id": "c2", "content": '{"success": true}'},
                {"role": "assistant", "content": "The count is 6."},
            ]
        else:
            messages = [
                {"role": "user", "content": "add 1 then add 2"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": name, "input": {"count": 1}},
                        {"type": "tool_use", "id": "t2", "name": name, "input": {"count": 2}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": '{"success": true}'},
                        {"type": "tool_result", "tool_use_id": "t2", "content": '{"success": true}'},
                    ],
                },
                {"role": "assistant", "content": [{"type": "text", "text": "The count is 6."}]},
            ]
        verdict = httpx.post(
            f"{counter_bridge.url}/verify",
            json={"trajectory": {"format": fmt, "messages": messages}},
            headers={HEADER: token},
        ).json()
        assert verdict["reward"] == 1.0, (fmt, verdict)
        assert verdict["_bridge"]["normalized"] == {name: "increment_counter"}
        assert (
            verdict["_bridge"]["recorded_tool_calls"] == 2 and verdict["_bridge"]["agent_never_ran"] is False
        )
        assert "mask_sample" not in verdict


def test_wrong_final_state_scores_0_through_the_bridge(counter_bridge: BridgeProcess) -> None:
    seed = counter_bridge.seed(counter_row(3, expected=6))
    headers = seed["mcp"]["headers"]
    httpx.post(f"{counter_bridge.url}/increment_counter", json={"count": 1}, headers=headers)
    verdict = httpx.post(
        f"{counter_bridge.url}/verify", json={"trajectory": {"format": "recorded"}}, headers=headers
    )
    assert verdict.json()["reward"] == 0.0 and verdict.json()["_bridge"]["agent_never_ran"] is False


@pytest.mark.parametrize(
    ("output", "usage", "never_ran"),
    [
        ([], None, True),
        ([], {"input_tokens": 0, "output_tokens": 0}, True),
        ([], {"input_tokens": 812, "output_tokens": 0}, False),  # the model read the prompt, answered nothing
        (
            [
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "6", "annotations": []}],
                }
            ],
            None,
            False,
        ),
    ],
)
def test_agent_never_ran_masks_the_sample(
    counter_bridge: BridgeProcess, output: list[Any], usage: dict[str, int] | None, never_ran: bool
) -> None:
    seed = counter_bridge.seed(counter_row(0, expected=0))
    response = {
        "id": "resp_x",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
    if usage is not None:
        usage.update(
            total_tokens=usage["input_tokens"] + usage["output_tokens"],
            input_tokens_details={"cached_tokens": 0},
            output_tokens_details={"reasoning_tokens": 0},
        )
    verdict = httpx.post(
        f"{counter_bridge.url}/verify", json={"response": response}, headers=seed["mcp"]["headers"]
    )
    body = verdict.json()
    assert verdict.status_code == 200, body
    assert body["_bridge"]["agent_never_ran"] is never_ran
    assert body.get("mask_sample", False) is never_ran
    assert body["reward"] == 1.0  # the upstream still scored it: counter 0 == expected 0


async def test_verify_after_upstream_restart_is_409_and_tools_say_session_lost(spawn_bridge) -> None:  # type: ignore[no-untyped-def]
    bridge: BridgeProcess = spawn_bridge([])
    seed = bridge.seed(counter_row(5))
    token = seed["mcp"]["headers"][HEADER]
    pid = bridge.health()["upstream"]["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        health = bridge.health()["upstream"]
        if health["ready"] and health["pid"] not in (None, pid):
            break
        time.sleep(0.2)
    assert bridge.health()["upstream"]["restarts"] == 1
    verdict = httpx.post(
        f"{bridge.url}/verify", json={"trajectory": {"format": "recorded"}}, headers={HEADER: token}
    )
    assert verdict.status_code == 409
    assert "session lost: the upstream resources server restarted" in verdict.json()["detail"]
    assert "reward" not in verdict.text
    async with mcp_client(seed["mcp"]["url"], token) as client:
        lost = await client.call_tool("get_counter_value", {})
    assert lost.is_error and "session lost" in lost.content[0].text  # type: ignore[union-attr]
    fresh = bridge.seed(counter_row(8))
    async with mcp_client(fresh["mcp"]["url"], fresh["mcp"]["headers"][HEADER]) as client:
        assert (await client.call_tool("get_counter_value", {})).structured_content == {"count": 8}


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", "replay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ},
    )


def replay_json(*args: str, bridge: BridgeProcess, convention: str) -> list[dict[str, Any]]:
    """``replay ... --native --json`` through ``bridge`` as ``convention``; it must exit 0."""
    result = replay(*args, "--bridge-url", bridge.url, "--as", convention, "--native", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return list(json.loads(result.stdout)["results"])


@pytest.mark.parametrize("convention", ["claude-code", "codex", "gemini", "agents-sdk"])
def test_replay_multi_step_rollouts_reproduces_recorded_and_native_rewards(
    multi_step: BridgeProcess, convention: str
) -> None:
    data = DATA / "example_multi_step" / "data"
    results = replay_json(
        str(data / "example_rollouts.jsonl"),
        "--rows",
        str(data / "example.jsonl"),
        bridge=multi_step,
        convention=convention,
    )
    assert [r["status"] for r in results] == ["match"] * 5
    assert all(r["recorded"] == r["native"] == r["bridge"] == 1.0 for r in results)
    assert all(r["normalized"] for r in results), "names were rendered and had to be normalized"


@pytest.mark.parametrize(
    ("convention", "drop_last", "reward"),
    [("claude-code", False, 1.0), ("codex", False, 1.0), ("gemini", True, 0.0), ("opencode", True, 0.0)],
)
def test_replay_workplace_ground_truth_matches_native(
    workplace: BridgeProcess, convention: str, drop_last: bool, reward: float
) -> None:
    rows = DATA / "workplace_assistant" / "data" / "example.jsonl"
    drop = ["--drop-last"] if drop_last else []
    results = replay_json(str(rows), "--from", "ground-truth", *drop, bridge=workplace, convention=convention)
    assert [(r["native"], r["bridge"]) for r in results] == [(reward, reward)] * 5


def test_replay_without_rows_says_which_records_it_cannot_verify_and_fails(
    multi_step: BridgeProcess, tmp_path: Path
) -> None:
    data = DATA / "example_multi_step" / "data"
    other_rows = tmp_path / "rows.jsonl"
    other_rows.write_text(json.dumps(gym_data("example_session_state_mgmt")[0]) + "\n")
    result = replay(
        str(data / "example_rollouts.jsonl"), "--rows", str(other_rows), "--bridge-url", multi_step.url
    )
    assert result.returncode == 1
    assert "no row in --rows has this record's id or prompt" in result.stdout
    assert "0 match, 0 mismatch, 5 unverifiable" in result.stdout
