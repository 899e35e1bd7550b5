"""Scoring evidence end to end: a real bridge in front of a real Gym resources
server, sessions seeded and tools called over MCP with the SDK client, then ``/verify``.

* Codex's 128-character rule: names the real Codex 0.171.0 showed its model under 90- and
  127-character server names (read from ``tests/fixtures/client_names/codex-cli.json``, never from
  our renderer) score ``workplace_assistant``'s ground truth as Gym scores it natively; Gym itself,
  handed those names, scores 0.0 (what the bridge gave before, with its 64-character rule).
* Harness tools: a session tool that shares its bare name with Gemini CLI's own ``read_file``
  (``tests/fixtures/harness_named_server.py``) scores only on this session's own served call, never
  on a neighbour session's; Claude Code's ``ToolSearch`` is reported as a harness tool.
* Gym's ``mcp_tool_call_provenance``: confirms calls under the seed's server name, refutes a bare
  name it says went to another server, and proves a server only with this session's served calls.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import (
    HEADER,
    BridgeProcess,
    counter_row,
    gym_data,
    mcp_client,
    running_bridge,
    upstream_url,
)
from tests.fixtures.harness import ground_truth_solution, native_reward, verify
from tests.fixtures.helpers import fault_env, gym_response

pytestmark = pytest.mark.anyio
CODEX_NAMES = Path(__file__).resolve().parent / "fixtures" / "client_names" / "codex-cli.json"
HARNESS_SPEC = "tests.fixtures.harness_named_server:HarnessNamedToolServer"
READ_ROW: dict[str, Any] = {
    "responses_create_params": {"input": "What does notes.txt say?"},
    "expected_path": "notes.txt",
}


def call(call_id: str, name: str, arguments: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


async def seed_and_call(
    bridge: BridgeProcess, row: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    """Seed ``row`` and make ``calls`` over MCP; the seed's ``mcp`` metadata."""
    metadata = dict(bridge.seed(row)["mcp"])
    async with mcp_client(f"{bridge.url}/mcp", metadata["headers"][HEADER]) as client:
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
    return metadata


# --------------------------------------------------------------------------------------------
# Item 4: Codex's names past 128 characters
# --------------------------------------------------------------------------------------------


def codex_names(server: str) -> dict[str, tuple[str, str]]:
    """tool -> (namespace, name) as Codex 0.171.0 offered it under ``server`` (captured)."""
    cases = json.loads(CODEX_NAMES.read_text())["cases"]
    return {c["tool"]: (c["namespace"], c["emitted"]) for c in cases if c["server"] == server}


def long_servers() -> list[str]:
    cases = json.loads(CODEX_NAMES.read_text())["cases"]
    return sorted({c["server"] for c in cases if len(c["server"]) in (90, 127) and len(c["tools"]) > 2})


def long_tool_row() -> dict[str, Any]:
    """The first workplace row whose ground truth calls a tool Codex hashes under a 90-character server."""
    return next(
        r for r in gym_data("workplace_assistant") if any(len(c["name"]) > 31 for c in r["ground_truth"])
    )


def codex_response(row: dict[str, Any], server: str) -> dict[str, Any]:
    names = codex_names(server)
    output = []
    for index, (tool, arguments) in enumerate(ground_truth_solution(row)):
        namespace, name = names[tool]
        output.append(call(f"call_{index}", name, arguments, namespace))
    return gym_response(output)


@pytest.mark.parametrize("server", long_servers(), ids=lambda s: f"server-{len(s)}-chars")
async def test_codex_names_under_a_long_server_score_like_native(
    workplace_bridge: BridgeProcess, server: str
) -> None:
    row = long_tool_row()
    solution = ground_truth_solution(row)
    response = codex_response(row, server)
    hashed = [i["name"] for i in response["output"] if i["name"] not in {t for t, _ in solution}]
    assert hashed, "the captured names past 128 characters carry Codex's hash"
    native = native_reward(upstream_url(workplace_bridge.url), row, solution)
    assert native == 1.0
    # the control: Gym, handed Codex's names flattened, does not know them (the bridge gave this
    # too while it applied a 64-character rule)
    flat = [
        {**i, "name": i["namespace"].rstrip("_") + "__" + i["name"].lstrip("_")} for i in response["output"]
    ]
    with httpx.Client(base_url=upstream_url(workplace_bridge.url), timeout=60) as gym:
        gym.post("/seed_session", json=row).raise_for_status()
        direct = gym.post("/verify", json={**row, "response": {**response, "output": flat}})
        assert direct.json()["reward"] == 0.0

    metadata = await seed_and_call(workplace_bridge, row, solution)
    token = metadata["headers"][HEADER]
    body: dict[str, Any] = {**row, "response": response}
    if len(server) > 108:  # the namespace itself is cut: the log cannot show the server, declare it
        body["_bridge"] = {"server_aliases": [server]}
    verdict = verify(workplace_bridge, token, body)
    assert verdict["reward"] == native, verdict["_bridge"]
    assert verdict["_bridge"]["unresolved"] == []
    assert sorted(verdict["_bridge"]["normalized"].values()) == sorted({t for t, _ in solution})
    if len(server) <= 108:
        assert verdict["_bridge"]["proven_aliases"] == [server]  # proven by this session's calls
    echoed = [i for i in verdict["response"]["output"] if i["type"] == "function_call"]
    assert [(i["namespace"], i["name"]) for i in echoed] == [
        (i["namespace"], i["name"]) for i in response["output"]
    ]


async def test_a_hashed_name_of_no_session_tool_stays_unresolved(workplace_bridge: BridgeProcess) -> None:
    """The counter's ``increment_counter`` as Codex hashed it under a 105-character server: the
    alias is declared, the hash recomputes for no tool of a workplace session."""
    [server] = {c["server"] for c in json.loads(CODEX_NAMES.read_text())["cases"] if len(c["server"]) == 105}
    namespace, name = codex_names(server)["increment_counter"]
    row = gym_data("workplace_assistant")[0]
    metadata = await seed_and_call(workplace_bridge, row, [])
    body = {
        **row,
        "response": gym_response([call("call_0", name, {"count": 1}, namespace)]),
        "_bridge": {"server_aliases": [server]},
    }
    verdict = verify(workplace_bridge, metadata["headers"][HEADER], body)
    assert verdict["_bridge"]["unresolved"] == [{"name": f"{namespace}.{name}", "reason": "unknown tool"}]
    assert verdict["_bridge"]["normalized"] == {}
    assert verdict["reward"] == 0.0


# --------------------------------------------------------------------------------------------
# Item 6: Gym's mcp_tool_call_provenance
# --------------------------------------------------------------------------------------------


def provenance_body(row: dict[str, Any], server: str) -> dict[str, Any]:
    """The ground truth under bare names (as Gym's converters write MCP calls), with provenance."""
    output = [call(f"call_{i}", tool, args) for i, (tool, args) in enumerate(ground_truth_solution(row))]
    return {
        **row,
        "response": gym_response(output),
        "mcp_tool_call_provenance": {
            item["call_id"]: {"server_name": server, "tool_name": item["name"]} for item in output
        },
    }


async def test_provenance_confirms_refutes_and_is_proven_only_by_this_sessions_calls(
    workplace_bridge: BridgeProcess,
) -> None:
    row = gym_data("workplace_assistant")[0]
    solution = ground_truth_solution(row)
    served = await seed_and_call(workplace_bridge, row, solution)
    idle = await seed_and_call(workplace_bridge, row, [])

    confirmed = verify(
        workplace_bridge, served["headers"][HEADER], provenance_body(row, served["server_name"])
    )
    assert confirmed["reward"] == 1.0, confirmed["_bridge"]
    assert confirmed["_bridge"]["mcp_tool_call_provenance"] == {
        "given": len(solution),
        "confirmed": len(solution),
        "forwarded": True,  # nemo-gym 0.4.0's flat verify model ignores extra keys: it takes the field
    }

    # another server's calls under the session's bare tool names: never scored as ours
    foreign = verify(workplace_bridge, idle["headers"][HEADER], provenance_body(row, "filesystem"))
    assert foreign["reward"] == 0.0
    assert {u["reason"] for u in foreign["_bridge"]["unresolved"]} == {
        "provenance names server 'filesystem': no known alias, no recorded call"
    }
    assert [i["name"] for i in foreign["response"]["output"]] == [t for t, _ in solution]  # names back

    # a server name the bridge was never told: this session's own calls prove it, a neighbour's do not
    proven = verify(workplace_bridge, served["headers"][HEADER], provenance_body(row, "my-harness-env"))
    assert proven["reward"] == 1.0 and proven["_bridge"]["proven_aliases"] == ["my-harness-env"]
    neighbour = verify(workplace_bridge, idle["headers"][HEADER], provenance_body(row, "my-harness-env"))
    assert neighbour["reward"] == 0.0 and neighbour["_bridge"]["proven_aliases"] == []


# --------------------------------------------------------------------------------------------
# Item 5: a session tool named like a harness's own tool
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def read_file_bridge(log_dir: Path) -> Iterator[BridgeProcess]:
    with running_bridge(log_dir, "--resources-server", HARNESS_SPEC, **fault_env()) as bridge:
        yield bridge


async def test_a_bare_harness_name_scores_only_on_this_sessions_own_call(
    read_file_bridge: BridgeProcess,
) -> None:
    read = [("read_file", {"path": "notes.txt"})]
    served = await seed_and_call(read_file_bridge, READ_ROW, read)
    neighbour = await seed_and_call(read_file_bridge, READ_ROW, [("read_file", {"path": "todo.txt"})])
    idle = await seed_and_call(read_file_bridge, READ_ROW, [])
    body = {**READ_ROW, "response": gym_response([call("c1", "read_file", {"path": "notes.txt"})])}

    own = verify(read_file_bridge, served["headers"][HEADER], body)
    assert own["reward"] == 1.0, own["_bridge"]
    assert own["_bridge"]["harness_tools"] == [] and own["_bridge"]["unresolved"] == []

    for session in (neighbour, idle):  # the call the first session served proves nothing here
        other = verify(read_file_bridge, session["headers"][HEADER], body)
        assert other["reward"] == 0.0
        [entry] = other["_bridge"]["harness_tools"]
        assert entry["name"] == "read_file" and "gemini-cli" in entry["clients"]
        assert entry["reason"] == "also a tool of this session; no call the session served proves it"
        assert other["response"]["output"][0]["name"] == "read_file"  # the caller's name comes back

    # with provenance naming this server, still no credit without the session's own call
    claimed = {
        **body,
        "mcp_tool_call_provenance": {"c1": {"server_name": idle["server_name"], "tool_name": "read_file"}},
    }
    assert verify(read_file_bridge, idle["headers"][HEADER], claimed)["reward"] == 0.0


async def test_claude_codes_tool_search_is_a_harness_tool_not_an_unresolved_name(
    read_file_bridge: BridgeProcess,
) -> None:
    served = await seed_and_call(read_file_bridge, READ_ROW, [("read_file", {"path": "notes.txt"})])
    server = served["server_name"]
    output = [
        call("c0", "ToolSearch", {"query": f"select:mcp__{server}__read_file", "max_results": 1}),
        call("c1", f"mcp__{server}__read_file", {"path": "notes.txt"}),
    ]
    verdict = verify(
        read_file_bridge, served["headers"][HEADER], {**READ_ROW, "response": gym_response(output)}
    )
    assert verdict["reward"] == 1.0
    assert verdict["_bridge"]["harness_tools"] == [{"name": "ToolSearch", "clients": ["claude-code"]}]
    assert verdict["_bridge"]["unresolved"] == []


# --------------------------------------------------------------------------------------------
# Item 6 on Gym 0.7's typed verify: a real nemo-gym 0.7.0 server whose /verify takes
# ResourcesVerifyRequest (tests/fixtures/gym07/typed_counter.py), the bridge managing it
# --------------------------------------------------------------------------------------------

GYM07_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gym07"
INCREMENT = ("increment_counter", {"count": 2})


@pytest.fixture(scope="module")
def typed07_bridge(gym07_python: Path, log_dir: Path) -> Iterator[BridgeProcess]:
    path = os.pathsep.join(p for p in (str(GYM07_FIXTURES), os.environ.get("PYTHONPATH", "")) if p)
    args = ["--gym-python", str(gym07_python), "--resources-server", "typed_counter:TypedCounterServer"]
    bridge = BridgeProcess(args=args, env={"PYTHONPATH": path}).start(log_dir, timeout=300)
    yield bridge
    bridge.stop()


def typed_body(
    output: list[dict[str, Any]], claims: dict[str, Any] | None, at_top: bool = False
) -> dict[str, Any]:
    """Gym 0.7's typed verify body for the counter row (3 + 2 = 5), ``claims`` beside the response
    (or at the typed body's top)."""
    inner: dict[str, Any] = {"response": gym_response(output), "expected_count": 5}
    body: dict[str, Any] = {
        "episode_id": {"rollout_id": "r1"},
        "task_id": {"taskset": "counter", "task_id": "t1"},
        "verification_input": inner,
    }
    if claims is not None:
        (body if at_top else inner)["mcp_tool_call_provenance"] = claims
    return body


def typed_verify(
    bridge: BridgeProcess, token: str, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The upstream's typed answer and the bridge's report (typed answers carry it in the header only)."""
    answer = httpx.post(f"{bridge.url}/verify", json=body, headers={HEADER: token}, timeout=120)
    assert answer.status_code == 200, answer.text
    assert "_bridge" not in answer.json()
    return dict(answer.json()), json.loads(answer.headers["x-gym-mcp-bridge"])


def identity(server: str, tool: str) -> dict[str, str]:
    return {"server_name": server, "tool_name": tool}


async def test_provenance_in_a_typed_verification_input_credits_only_this_sessions_served_call(
    typed07_bridge: BridgeProcess,
) -> None:
    served = await seed_and_call(typed07_bridge, counter_row(3, 5), [INCREMENT])
    neighbour = await seed_and_call(typed07_bridge, counter_row(4, 5), [("increment_counter", {"count": 1})])
    server = served["server_name"]
    # a name no client rule explains; only the structured record says which tool it was
    output = [call("c1", "counter.increment", INCREMENT[1])]
    body = typed_body(output, {"c1": identity(server, "increment_counter")})

    answer, report = typed_verify(typed07_bridge, served["headers"][HEADER], body)
    assert answer == {"reward": 1.0, "provenance_seen": {"c1": identity(server, "increment_counter")}}
    assert report["mcp_tool_call_provenance"] == {"given": 1, "confirmed": 1, "forwarded": True}
    assert report["normalized"] == {"counter.increment": "increment_counter"}

    # the neighbour served increment_counter too (4 + 1: its counter is 5 as well), with other
    # arguments: so only the claim could score it; uncredited, the upstream is told of no MCP call
    answer, report = typed_verify(typed07_bridge, neighbour["headers"][HEADER], body)
    assert answer == {"reward": 0.0, "provenance_seen": {}}
    assert report["mcp_tool_call_provenance"] == {"given": 1, "confirmed": 0, "forwarded": True}
    assert report["unresolved"] == [
        {
            "name": "counter.increment",
            "reason": f"provenance names {server}/increment_counter: no call the session served proves it",
        }
    ]
    # and the first session's reward is what it was
    assert typed_verify(typed07_bridge, served["headers"][HEADER], body)[0]["reward"] == 1.0


async def test_a_contradicting_or_foreign_claim_never_credits_even_a_served_call(
    typed07_bridge: BridgeProcess,
) -> None:
    served = await seed_and_call(typed07_bridge, counter_row(3, 5), [INCREMENT])
    token, server = served["headers"][HEADER], served["server_name"]
    output = [call("c1", "increment_counter", INCREMENT[1])]
    plain, _ = typed_verify(typed07_bridge, token, typed_body(output, None))
    assert plain == {"reward": 1.0, "provenance_seen": None}  # the control: the name alone scores

    for claim, reason in [
        (
            identity(server, "get_counter_value"),
            f"provenance names {server}/get_counter_value, the name resolves to increment_counter",
        ),
        (identity("filesystem", "increment_counter"), None),  # proven by this session's own call
        (
            identity(server, "reset_everything"),
            f"provenance names {server}/reset_everything: no tool of this session",
        ),
    ]:
        answer, report = typed_verify(typed07_bridge, token, typed_body(output, {"c1": claim}))
        if reason is None:
            assert answer["reward"] == 1.0 and report["proven_aliases"] == ["filesystem"]
            continue
        assert answer == {"reward": 0.0, "provenance_seen": {}}
        assert report["unresolved"] == [{"name": "increment_counter", "reason": reason}]


async def test_where_gym_07_refuses_the_field_the_bridge_strips_it(typed07_bridge: BridgeProcess) -> None:
    served = await seed_and_call(typed07_bridge, counter_row(3, 5), [INCREMENT])
    claims = {"c1": identity(served["server_name"], "increment_counter")}
    body = typed_body([call("c1", "counter.increment", INCREMENT[1])], claims, at_top=True)

    # the 0.7.0 server itself refuses the key at the top of a typed body
    upstream = httpx.get(f"{typed07_bridge.url}/healthz", timeout=10).json()["upstream"]["url"]
    direct = httpx.post(f"{upstream}/verify", json=body, timeout=60)
    assert direct.status_code == 422
    assert [(e["type"], e["loc"]) for e in direct.json()["detail"]] == [
        ("extra_forbidden", ["body", "mcp_tool_call_provenance"])
    ]

    answer, report = typed_verify(typed07_bridge, served["headers"][HEADER], body)
    assert answer == {"reward": 1.0, "provenance_seen": None}
    assert report["mcp_tool_call_provenance"] == {"given": 1, "confirmed": 1, "forwarded": False}


async def test_worst_provenance_values_are_refused_or_bounded_and_leave_a_neighbour_alone(
    typed07_bridge: BridgeProcess,
) -> None:
    served = await seed_and_call(typed07_bridge, counter_row(3, 5), [INCREMENT])
    idle = await seed_and_call(typed07_bridge, counter_row(5, 5), [])
    output = [call("c1", "counter.increment", INCREMENT[1])]
    good = {"c1": identity(served["server_name"], "increment_counter")}

    for claims, at_top_too in [
        ([], False),
        ({"c1": {"server_name": " ", "tool_name": "x"}}, False),
        (good, True),
    ]:
        body = typed_body(output, claims)
        if at_top_too:
            body["mcp_tool_call_provenance"] = good
        refused = httpx.post(
            f"{typed07_bridge.url}/verify", json=body, headers={HEADER: idle["headers"][HEADER]}
        )
        assert refused.status_code == 400 and "\n" not in refused.json()["detail"], refused.text
        assert "mcp_tool_call_provenance" in refused.json()["detail"]

    # huge: thousands of claims for calls that are not in the response, a 100,000-character server
    # name, every session tool named; the idle session (counter already 5) must still score 0.0
    many = {f"other_{i}": identity("x" * 40, "increment_counter") for i in range(5000)}
    many["c1"] = identity("s" * 100_000, "increment_counter")
    answer, report = typed_verify(typed07_bridge, idle["headers"][HEADER], typed_body(output, many))
    assert answer == {"reward": 0.0, "provenance_seen": {}}
    assert report["truncated"] is True and report["unresolved"] == 1  # the header past 4 KiB: counts
    assert report["mcp_tool_call_provenance"] == {"given": 5001, "confirmed": 0, "forwarded": True}
    # the neighbour that served the call still scores it
    assert (
        typed_verify(typed07_bridge, served["headers"][HEADER], typed_body(output, good))[0]["reward"] == 1.0
    )
