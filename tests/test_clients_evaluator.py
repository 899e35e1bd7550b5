"""NeMo Evaluator 0.3.0 drives the bridge as it drives Gym: its own classes, unmodified.

The Evaluator runs in its own environment (``.cache/evaluator-env``, Python 3.12, built from the
hashed lock by ``scripts/setup-evaluator-env.sh``) through the project's example,
``examples/evaluator/evaluate.py``, which uses only its public API: ``GymEnvironment`` /
``ManagedGymEnvironment`` (``native`` protocol, ``GymDataset``), ``run_evaluation``, ``GymSolver``
and ``HttpToolBackend``. Every expected value is what the same Evaluator run gets from Gym's own
server alone (nemo-gym 0.4.0, started with the bridge's boot script, no bridge in front):

- external mode, the API key in the URL (arrives as ``Authorization: Basic``): the Evaluator's
  native seed and verify of ``math_proof_judgement`` with a fixed-answer solver ("Judgement: Yes":
  right on the rows labelled Yes, wrong on the others) give, row by row, what Gym alone gives (on
  nemo-gym 0.4.0: Gym's 422, the Evaluator's envelope lacking fields Gym requires);
- managed by the Evaluator (``ManagedGymEnvironment`` starts the bridge and waits for ``/health``),
  with ``GymSolver`` through Gym's ``simple_agent`` and a fixed-answer stub model
  (``tests/interop/stubs/gym_model_stub.py``, every row answered "Judgement: Yes"): Gym's rewards,
  1.0 and 0.0 both present, equal row by row to the same agent in front of Gym alone;
- ``HttpToolBackend`` lists the same tools (names, descriptions, schemas) as against Gym alone, and
  its cookie-kept tool-call state behaves the same (kept with ``localhost``, not with ``127.0.0.1``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import (
    GYM_PYTHON,
    HEADER,
    ROOT,
    SECRET,
    BridgeProcess,
    boot_upstream,
    free_port,
    gym_data,
    gym_servers,
    wait_for_upstream,
)
from tests.fixtures.helpers import API_KEY, external_bridge, tools_row
from tests.interop.stubs.gym_model_stub import Plan, StubGymModelServer

EXAMPLE = ROOT / "examples" / "evaluator" / "evaluate.py"
SETUP = ROOT / "scripts" / "setup-evaluator-env.sh"
AGENTS = ROOT / "tests" / "interop" / "gym_collect_servers.py"
ENV = "math_proof_judgement"
ANSWER = "Judgement: Yes"  # the fixed answer: right on rows labelled Yes, wrong on those labelled No
COUNTER = "example_session_state_mgmt"


@pytest.fixture(scope="module")
def evaluator_python() -> Path:
    """NeMo Evaluator's interpreter, built once by the project's script (then reused by its stamp)."""
    result = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return ROOT / ".cache" / "evaluator-env" / "bin" / "python"


@pytest.fixture(scope="module")
def gym_alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Gym's own resources servers, no bridge in front: ``start(env)`` gives one's URL."""
    work = tmp_path_factory.mktemp("gym-alone")
    started: list[subprocess.Popen[bytes]] = []

    def start(env: str) -> str:
        port_file, log = work / f"{env}.port.json", work / f"{env}.log"
        proc = boot_upstream(GYM_PYTHON, env, port_file, log)
        started.append(proc)
        return wait_for_upstream(proc, port_file, log, time.monotonic() + 120)

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_example(python: Path, *args: str, timeout: float = 600, code: int = 0) -> list[dict[str, Any]]:
    """``examples/evaluator/evaluate.py`` in the Evaluator's environment (exiting ``code``); its JSON lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["GYM_MCP_BRIDGE_SECRET"] = SECRET  # for a bridge the Evaluator starts
    result = subprocess.run(
        [str(python), str(EXAMPLE), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == code, (result.stdout[-3000:], result.stderr[-6000:])
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def data_path() -> str:
    rows = gym_data(ENV)  # asserts the Gym environment is there
    assert {r["expected_judgement"] for r in rows} == {"Judgement: Yes", "Judgement: No"}
    return str(
        next(
            (ROOT / ".gym-env" / "lib").glob(
                f"python3.*/site-packages/resources_servers/{ENV}/data/example.jsonl"
            )
        )
    )


def with_key(url: str, key: str) -> str:
    return str(httpx.URL(url).copy_with(username="evaluator", password=key))


@pytest.mark.evaluator
def test_native_seed_and_verify_with_the_key_in_the_url_answer_as_gym_alone(
    evaluator_python: Path, gym_alone: Any, log_dir: Path
) -> None:
    upstream = gym_alone(ENV)
    bridge = external_bridge(log_dir, upstream, server_name=ENV, GYM_MCP_BRIDGE_API_KEY=API_KEY)
    try:
        data = data_path()
        expected = run_example(evaluator_python, "--resources-url", upstream, "--data", data)
        bridged = run_example(
            evaluator_python, "--resources-url", with_key(bridge.url, API_KEY), "--data", data
        )
        assert len(expected) == len(gym_data(ENV)) + 1
        assert bridged == expected, (bridged, expected)  # every row, and the summary
        # Gym's answer passed through: the Evaluator's own envelope is what nemo-gym 0.4.0 refuses
        assert {row.get("status") for row in expected[:-1]} == {422}, expected
        # without the key, or with a wrong one, the bridge refuses; Gym is not reached; no row is
        # scored, so the example exits 2 and prints no summary
        for url in (bridge.url, with_key(bridge.url, "not-the-key")):
            refused = run_example(evaluator_python, "--resources-url", url, "--data", data, code=2)
            assert {row.get("status") for row in refused} == {401}, refused
        assert API_KEY not in bridge.log()
    finally:
        bridge.stop()


@pytest.mark.evaluator
def test_tool_listing_and_cookie_state_through_http_tool_backend_equal_gym_alone(
    evaluator_python: Path, gym_alone: Any, log_dir: Path
) -> None:
    upstream = gym_alone(COUNTER)
    bridge = external_bridge(log_dir, upstream, server_name=COUNTER, GYM_MCP_BRIDGE_API_KEY=API_KEY)
    try:
        port, bridge_port = httpx.URL(upstream).port, bridge.port
        calls = ["--call", "increment_counter", '{"count": 2}'] * 2 + ["--call", "get_counter_value", "{}"]
        for host in ("localhost", "127.0.0.1"):
            alone = run_example(
                evaluator_python, "--resources-url", f"http://{host}:{port}", "--list-tools", *calls
            )
            bridged = run_example(
                evaluator_python,
                "--resources-url",
                with_key(f"http://{host}:{bridge_port}", API_KEY),
                "--list-tools",
                *calls,
            )
            assert bridged == alone, (host, bridged, alone)
            names = [t["function"]["name"] for t in alone[0]["tools"]]
            assert {"increment_counter", "get_counter_value"} <= set(names), names
            counted = json.loads(alone[0]["calls"][-1]["content"])
            # aiohttp keeps no cookies for an IP host: each call starts a new Gym session there
            assert counted == ({"count": 4} if host == "localhost" else {"count": 0}), (host, counted)
    finally:
        bridge.stop()


def test_openapi_document_lists_a_sessions_own_tools_with_their_schemas(
    counter_bridge: BridgeProcess,
) -> None:
    """With the session token, the document's tool routes are the session's (a row's own tools,
    schemas as the row declares them), beside Gym's routes; without it, the upstream's."""
    bridge = counter_bridge  # the shared default bridge: the test's session is its own
    row = tools_row("get_counter_value", "row_only_tool")
    declared = {t["name"]: t["parameters"] for t in row["responses_create_params"]["tools"]}
    token = bridge.seed(row)["mcp"]["headers"][HEADER]
    session = httpx.get(f"{bridge.url}/openapi.json", headers={HEADER: token}, timeout=10).json()
    gym_routes = {"/seed_session", "/verify", "/aggregate_metrics"}  # nemo-gym 0.4.0's, no /close_session
    assert set(session["paths"]) == gym_routes | {f"/{n}" for n in declared}
    made = session["paths"]["/row_only_tool"]["post"]["requestBody"]["content"]["application/json"]
    assert made["schema"] == declared["row_only_tool"]
    plain = httpx.get(f"{bridge.url}/openapi.json", timeout=10).json()
    assert "/row_only_tool" not in plain["paths"] and "/increment_counter" in plain["paths"]
    forged = httpx.get(f"{bridge.url}/openapi.json", headers={HEADER: "not-a-token"}, timeout=10)
    assert forged.status_code == 401 and "\n" not in forged.json()["detail"], forged.text


def test_health_answers_from_the_bind_and_openapi_waits_for_the_tools(log_dir: Path) -> None:
    bridge = BridgeProcess(args=[]).start(log_dir, wait_ready=False)
    try:
        deadline = time.monotonic() + 60
        starting = None
        while starting is None and time.monotonic() < deadline:
            try:
                starting = httpx.get(f"{bridge.url}/health", timeout=2)
                document = httpx.get(f"{bridge.url}/openapi.json", timeout=2)
            except httpx.TransportError:
                time.sleep(0.05)
        assert starting is not None and starting.status_code == 200, starting
        if starting.json().get("starting"):  # caught while the upstream boots
            assert document.status_code == 503 and document.headers.get("retry-after"), document.text
        bridge.wait_ready()
        assert httpx.get(f"{bridge.url}/health", timeout=5).status_code == 200
        assert httpx.get(f"{bridge.url}/openapi.json", timeout=5).status_code == 200
        # a load balancer or kubelet probes with an address as Host: /health is a probe, the
        # document is not (DNS-rebinding protection)
        foreign = {"host": "10.20.30.40:8000"}
        assert httpx.get(f"{bridge.url}/health", headers=foreign, timeout=5).status_code == 200
        assert httpx.get(f"{bridge.url}/openapi.json", headers=foreign, timeout=5).status_code == 421
    finally:
        bridge.stop()


@pytest.mark.evaluator
def test_managed_by_the_evaluator_gym_agent_rewards_equal_gym_alone(
    evaluator_python: Path, gym_alone: Any, tmp_path: Path
) -> None:
    """``ManagedGymEnvironment`` starts the bridge (its ``/health``), ``GymSolver`` runs each row through
    Gym's ``simple_agent``, whose model is a fixed-answer stub; Gym's own reward is the score."""
    upstream = httpx.URL(gym_alone(ENV))
    managed_port = free_port()
    rows = gym_data(ENV)
    with StubGymModelServer() as model:
        for row in rows:
            model.add(row["responses_create_params"], Plan([], ANSWER))
        plan = {
            "head": {"host": "127.0.0.1", "port": free_port()},
            "model": {"host": model.host, "port": model.port},
            "resources": {
                "alone": {"env": ENV, "host": upstream.host, "port": upstream.port},
                "bridged": {"env": ENV, "host": "127.0.0.1", "port": managed_port},
            },
            "agents": {
                "alone_agent": {"resources": "alone", "port": free_port()},
                "bridged_agent": {"resources": "bridged", "port": free_port()},
            },
            "ready_file": str(tmp_path / "agents.json"),
        }
        agent = {name: f"http://127.0.0.1:{spec['port']}" for name, spec in plan["agents"].items()}
        with gym_servers(GYM_PYTHON, AGENTS, plan, tmp_path / "agents.log", 240):
            expected = run_example(
                evaluator_python,
                "--resources-url",
                str(upstream),
                "--data",
                data_path(),
                "--agent-url",
                agent["alone_agent"],
            )
            serve = (
                f"exec {ROOT / '.venv' / 'bin' / 'gym-mcp-bridge'} serve --resources-server {ENV} "
                "--host 127.0.0.1 --port $PORT --listen-when-ready"
            )
            managed = run_example(
                evaluator_python,
                "--serve", serve, "--port", str(managed_port), "--startup-timeout", "90", "--data", data_path(),
                "--agent-url", agent["bridged_agent"],
            )  # fmt: skip
        assert model.unknown == [], model.unknown
    labels = [row["expected_judgement"] == ANSWER for row in rows]
    assert [r["reward"] for r in expected[:-1]] == [1.0 if right else 0.0 for right in labels], expected
    assert managed == expected, (managed, expected)
    # the Evaluator stopped what it started: the bridge (exec'd in place of the shell) is gone
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{managed_port}/health", timeout=2)
