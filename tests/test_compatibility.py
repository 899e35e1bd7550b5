"""A fast subset of the compatibility sweep (``make sweep``, ``tools/sweep.py``), on real Gym envs.

- ``example_mcp_weather``: an MCP-native upstream (Gym 0.4.0's ``MCPResourcesServer``): tools found
  through its own ``/mcp``, calls forwarded with its own session token, rewards equal native;
- ``calendar``: its own ``requirements.txt`` (an environment built on first use, with a progress
  line) and ``from utils import ...`` relative to its own directory;
- ``circle_click``: arguments reach the upstream as the model sent them, and the model reads the
  upstream's own answer (no bridge-side schema refusal).

Plus the pieces without a bridge: config resolution and working directory in the boot script, the
requirement filter, and the one-line install error.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.commands import replay
from bridge.upstream import envs as gym_envs
from tests.fixtures.bridges import (
    BOOT,
    GYM_PYTHON,
    GYM_SITE,
    HEADER,
    ROOT,
    BridgeProcess,
    gym_data,
    mcp_client,
)
from tools import sweep
from tools.sweep_report import EnvResult

pytestmark = pytest.mark.anyio


async def _parity(bridge: BridgeProcess, env: str) -> EnvResult:
    result = EnvResult(env, started=True)
    await sweep.score(bridge.url, env, result)
    return result


async def test_mcp_native_upstream_scores_as_natively(spawn_bridge: Any) -> None:
    bridge = spawn_bridge(["--resources-server", "example_mcp_weather"])
    result = await _parity(bridge, "example_mcp_weather")
    assert result.tools == 1 and result.rollouts == 5
    assert (result.native_scored, result.parity) == (5, 5), result.mismatches
    # the caller gets the bridge's own token and metadata, never the upstream's
    seeded = bridge.seed(gym_data("example_mcp_weather")[0])
    assert seeded["mcp"]["url"] == f"{bridge.url}/mcp" and seeded["mcp"]["tool_names"] == ["get_weather"]
    token = seeded["mcp"]["headers"][HEADER]
    assert token.count(".") == 2  # a JWT, not itsdangerous' value
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        listed = await client.list_tools()
        called = await client.call_tool("get_weather", {"city": "Paris"})
    assert [t.name for t in listed.tools] == ["get_weather"]
    assert "city" in listed.tools[0].input_schema["properties"]
    assert not called.is_error and called.content[0].text == "The weather in Paris is sunny and 72 F."  # type: ignore[union-attr]


async def test_own_requirements_and_own_directory(spawn_bridge: Any, tmp_path: Path) -> None:
    cache = tmp_path / "gym-envs"
    bridge = spawn_bridge(["--resources-server", "calendar"], env={"GYM_MCP_BRIDGE_GYM_ENVS_DIR": str(cache)})
    assert "building the environment of calendar" in bridge.log()
    assert "built the environment of calendar" in bridge.log()
    built = [d for d in cache.iterdir() if d.is_dir()]
    assert len(built) == 1 and built[0].name.startswith("calendar-")
    assert (built[0] / gym_envs.COMPLETE_MARKER).is_file()
    assert bridge.health()["upstream"]["pid"] is not None
    result = await _parity(bridge, "calendar")
    assert result.rollouts == 5 and (result.native_scored, result.parity) == (5, 5), result.mismatches
    bridge.stop()
    again = spawn_bridge(["--resources-server", "calendar"], env={"GYM_MCP_BRIDGE_GYM_ENVS_DIR": str(cache)})
    assert "building the environment" not in again.log()  # reused


async def test_arguments_reach_the_upstream_as_sent(spawn_bridge: Any) -> None:
    bridge = spawn_bridge(["--resources-server", "circle_click"])
    row = gym_data("circle_click")[0]
    arguments = {"x": [637, 669], "y": "456"}  # against the row's schema; Gym's server answers anyway
    upstream = bridge.health()["upstream"]["url"]
    with httpx.Client(base_url=upstream, timeout=60) as native:
        native.post("/seed_session", json=row).raise_for_status()
        natively = native.post("/click", json=arguments)
    token = bridge.seed(row)["mcp"]["headers"][HEADER]
    async with mcp_client(f"{bridge.url}/mcp", token) as client:
        bridged = await client.call_tool("click", arguments)
    assert bridged.content[0].text == natively.text  # type: ignore[union-attr]
    assert bridged.is_error is (natively.status_code >= 400)
    result = await _parity(bridge, "circle_click")
    assert (result.native_scored, result.parity) == (result.rollouts, result.rollouts), result.mismatches


async def test_gymnasium_upstream_scores_by_step_as_natively(spawn_bridge: Any) -> None:
    """Gym's ``GymnasiumServer`` has no ``/seed_session`` and no ``/verify``: a session opens at
    ``/reset`` and each ``/step`` answers its reward. Through the bridge: a seed that does not reach
    the upstream, ``reset``/``step`` as MCP tools on per-session upstream cookies, and ``/verify``
    refused with the reason instead of the upstream's bare 404."""
    bridge = spawn_bridge(["--resources-server", "example_multi_turn_gymnasium"])
    result = await _parity(bridge, "example_multi_turn_gymnasium")
    assert result.tools == 2 and result.rollouts == 5
    assert (result.native_scored, result.parity) == (5, 5), (result.mismatches, result.note)

    rows = gym_data("example_multi_turn_gymnasium")
    row_a, row_b = [r for r in rows if r["follow_ups"]][:2]
    say = sweep.model_turns(
        gym_data("example_multi_turn_gymnasium", "example_rollouts.jsonl")[0]["response"]
    )[0]
    seeded = {name: bridge.seed(row)["mcp"]["headers"][HEADER] for name, row in (("a", row_a), ("b", row_b))}
    async with (
        mcp_client(f"{bridge.url}/mcp", seeded["a"]) as a,
        mcp_client(f"{bridge.url}/mcp", seeded["b"]) as b,
    ):
        assert not (await a.call_tool("reset", row_a)).is_error
        assert not (await b.call_tool("reset", row_b)).is_error
        first_a = json.loads((await a.call_tool("step", row_a | {"response": say})).content[0].text)  # type: ignore[union-attr]
        # B's first step reads B's first follow-up: A's step did not advance B's upstream session
        first_b = json.loads((await b.call_tool("step", row_b | {"response": say})).content[0].text)  # type: ignore[union-attr]
    assert first_a["observation"] == row_a["follow_ups"][0]
    assert first_b["observation"] == row_b["follow_ups"][0]
    refused = httpx.post(
        f"{bridge.url}/verify", json={"response": say}, headers={HEADER: seeded["a"]}, timeout=30
    )
    assert refused.status_code == 404 and "has no /verify" in refused.json()["detail"], refused.text


def test_rollouts_join_their_rows_by_gym_task_index() -> None:
    """Gym's collection writes ``_ng_task_index``; it joins only when that row has the record's
    prompt. ``asr_with_pc``'s rows share one prompt (the audio differs), so only the index can
    tell them apart; ``indirect_prompt_injection``'s rollouts came from other rows than the shipped
    ones, so an index in range must not join them."""
    rows = gym_data("asr_with_pc")
    for record in gym_data("asr_with_pc", "example_rollouts.jsonl"):
        assert replay.join_row(record, rows)[0] is rows[record["_ng_task_index"]]
        without_index = {k: v for k, v in record.items() if k != "_ng_task_index"}
        assert replay.join_row(without_index, rows)[0] is None  # the prompt alone is ambiguous
    rows = gym_data("indirect_prompt_injection")
    records = gym_data("indirect_prompt_injection", "example_rollouts.jsonl")
    assert all(0 <= r["_ng_task_index"] < len(rows) for r in records)
    assert [replay.join_row(r, rows)[0] for r in records] == [None] * len(records)


def test_unjoined_rollouts_fall_back_to_the_rows_ground_truth() -> None:
    """``workplace_assistant`` ships rollouts of rows it does not ship (and no ground truth in them),
    so the sweep replays the shipped rows' ``ground_truth`` actions instead."""
    rows = gym_data("workplace_assistant")
    cases, source = sweep.cases_of("workplace_assistant")
    assert "ground-truth" in source
    assert [row for row, _ in cases] == rows
    for row, response in cases:
        calls = [
            (i["name"], json.loads(i["arguments"]))
            for i in response["output"]
            if i["type"] == "function_call"
        ]
        expected = [
            (a["name"], json.loads(a["arguments"]) if isinstance(a["arguments"], str) else a["arguments"])
            for a in row["ground_truth"]
        ]
        assert calls == expected


def test_the_published_table_is_its_runs_json_rendered(tmp_path: Path) -> None:
    """docs/compatibility.md is what ``make sweep`` wrote; ``--render`` of the run's JSON must give it
    back byte for byte, date and machine included (they are the run's, kept in the JSON), so the
    table cannot drift from the run it reports nor be edited by hand."""
    out = tmp_path / "compatibility.md"
    results = ROOT / "tools" / "results" / "compatibility.json"
    assert sweep.main(["--render", str(results), "--out", str(out)]) == 0
    assert out.read_text() == (ROOT / "docs" / "compatibility.md").read_text()


def _boot_resolve(spec: str, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    script = (
        "import importlib.util, json, os, sys\n"
        f"spec = importlib.util.spec_from_file_location('upstream_boot', {str(BOOT)!r})\n"
        "upstream_boot = sys.modules['upstream_boot'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(upstream_boot)\n"
        "r = upstream_boot.resolve(sys.argv[1], None)\n"
        "print(json.dumps({'config': r.config, 'cwd': os.getcwd(), 'name': r.name,"
        " 'pythonpath': os.environ['PYTHONPATH'], 'cls': r.cls.__name__}))\n"
    )
    done = subprocess.run(
        [str(GYM_PYTHON), "-c", script, spec],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_config_is_resolved_and_the_server_runs_in_its_directory(tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text(
        "counter:\n"
        "  resources_servers:\n"
        "    example_session_state_mgmt:\n"
        "      entrypoint: app.py\n"
        "      domain: ${oc.env:COMPAT_TEST_DOMAIN,other}\n"
        "      description: ${shared_text}\n"
        "shared_text: from the top level\n"
    )
    found = _boot_resolve(f"{config}:counter", tmp_path, {"COMPAT_TEST_DOMAIN": "agent"})
    assert found["config"]["domain"] == "agent" and found["config"]["description"] == "from the top level"
    assert found["name"] == "counter" and found["cls"] == "StatefulCounterResourcesServer"
    assert GYM_SITE is not None
    env_dir = GYM_SITE / "resources_servers" / "example_session_state_mgmt"
    assert found["cwd"] == str(env_dir) and found["pythonpath"].split(os.pathsep)[0] == str(env_dir)


def test_missing_config_value_is_one_line_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(GYM_PYTHON), str(BOOT), "--server", "browsecomp_advanced_harness"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("upstream_boot: ") and "'tavily_api_key'" in last and "env.yaml" in last


def test_requirements_as_gym_installs_them(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        "-e nemo-gym[dev] @ ../../\n# a comment\n\nxmltodict==1.0.2  # pinned\npyyaml>=6.0\n-e ../..\n"
    )
    assert gym_envs.requirement_lines(tmp_path) == ["xmltodict==1.0.2", "pyyaml>=6.0"]
    assert gym_envs.requirement_lines(tmp_path / "nowhere") == []
    # no requirements.txt: Gym installs the pyproject.toml's project (`uv pip install --no-sources
    # '-e .'`, nemo_gym/cli/setup_command.py), i.e. its dependencies from the registry
    assert GYM_SITE is not None
    code_fim = GYM_SITE / "resources_servers" / "code_fim"
    assert not (code_fim / "requirements.txt").exists()
    assert gym_envs.requirement_lines(code_fim) == ["human-eval-infilling"]


def test_install_failure_is_one_line_naming_the_package() -> None:
    unresolvable = (
        "Using Python 3.12.1 environment at: /x\n"
        "  \u00d7 No solution found when resolving dependencies:\n"
        "  ╰─▶ Because there is no version of torch==9.12.0 and you require torch==9.12.0, we can conclude "
        "that your requirements are unsatisfiable.\n"
    )
    line = gym_envs.failed_package(["numpy>=1.26", "torch==9.12.0"], unresolvable)
    assert line.startswith("cannot install 'torch==9.12.0'") and "\n" not in line
    offline = (
        "error: Failed to download and build `tale-suite @ git+https://github.com/microsoft/tale-suite.git`\n"
        "  Caused by: Git operation failed\n"
        "         fatal: unable to access 'https://github.com/microsoft/tale-suite.git/': Could not resolve host: github.com\n"
    )
    lines = ["git+https://github.com/microsoft/tale-suite.git@train_test_splits#egg=tale-suite"]
    line = gym_envs.failed_package(lines, offline)
    assert "tale-suite" in line and "Could not resolve host: github.com" in line and "\n" not in line
