"""nemo-gym 0.7.0 upstreams and Gym 0.7's request shapes, with real parts only.

* The nemo-gym 0.7.0 environment is built by the project's own builder (``make gym-env
  NEMO_GYM_VERSION=0.7.0`` = ``scripts/setup-gym-env.sh``, through ``tools.gym_env.ensure_gym07_env``;
  stamp-cached in ``.gym-env-0.7.0``; about 80-90 s on a fresh machine with a warm uv cache).
* A real Gym 0.7.0 resources server (Gym's stateful counter plus a tool that echoes the rollout id
  Gym's own middleware saw: ``tests/fixtures/gym07/rollout_echo.py``) runs once directly and once as
  the bridge's managed upstream (``serve --gym-python .gym-env-0.7.0/bin/python``).
* Gym 0.7's own ``ServerClient`` with ``observability_enabled: true`` (``tests/fixtures/gym07/
  gym_client.py``, run in that environment) sends one rollout's requests, each under
  ``/ng-rollout/<rollout id>/``, to both; the expected values are the Gym server's own answers.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks import procs
from tests.fixtures.bridges import (
    HEADER,
    ROOT,
    BridgeProcess,
    boot_upstream,
    counter_row,
    wait_for_upstream,
)
from tests.fixtures.helpers import MCP_HEADERS
from tests.test_observability import spans_in
from tools.gym_env import GYM07_ENV, gym_version, uv

FIXTURES = ROOT / "tests" / "fixtures" / "gym07"
ECHO = "rollout_echo:RolloutEchoServer"
ROLLOUT = "7-3"
CALL = {"call_id": "call_inc", "name": "increment_counter", "arguments": '{"count": 2}'}


def response_with(*calls: dict[str, str]) -> dict[str, Any]:
    output = [
        {"type": "function_call", "id": f"fc_{c['call_id']}", "status": "completed", **c} for c in calls
    ]
    return {
        "id": "resp_1",
        "created_at": 0,
        "model": "stub",
        "object": "response",
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
    }


STEPS: list[tuple[str, dict[str, Any]]] = [
    ("/seed_session", {"initial_count": 3}),
    ("/increment_counter", {"count": 2}),
    ("/current_rollout_id", {}),
    ("/get_counter_value", {}),
    (
        "/verify",
        {
            "expected_count": 5,
            "responses_create_params": {"input": [{"role": "user", "content": "add 2"}]},
            "response": response_with(CALL),
        },
    ),
]


def gym_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture(scope="module")
def gym07_server(gym07_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Gym 0.7.0 server the bridge is compared with, started on its own (boot script)."""
    workdir = tmp_path_factory.mktemp("gym07-direct")
    port_file, log = workdir / "port.json", workdir / "upstream.log"
    proc = boot_upstream(gym07_python, ECHO, port_file, log, gym_env())
    try:
        yield wait_for_upstream(proc, port_file, log, time.monotonic() + 300)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gym07-audit") / "audit.jsonl"


@pytest.fixture(scope="module")
def gym07_bridge(gym07_python: Path, log_dir: Path, audit_log: Path) -> Iterator[BridgeProcess]:
    """The bridge managing the same Gym 0.7.0 server itself: ``serve --gym-python <0.7 env>``."""
    args = ["--gym-python", str(gym07_python), "--resources-server", ECHO, "--audit-log", str(audit_log)]
    env = {
        "PYTHONPATH": gym_env()["PYTHONPATH"],
        "OTEL_TRACES_EXPORTER": "console",  # spans into the bridge's log, read back by spans_in
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "bridge-gym07",
    }
    bridge = BridgeProcess(args=args, env=env)
    bridge.start(log_dir, timeout=300)
    yield bridge
    bridge.stop()


def rollout(url: str, steps: list[tuple[str, dict[str, Any]]], **spec: Any) -> dict[str, Any]:
    """One rollout for ``gym_client``: Gym's client's resources server at ``url``, the steps, and
    ``rollout_id`` / ``observability``."""
    return {"host": httpx.URL(url).host, "port": httpx.URL(url).port, "steps": steps, **spec}


def gym_client(python: Path, *rollouts: dict[str, Any]) -> list[list[Any]]:
    """Gym's own ServerClient (``tests/fixtures/gym07/gym_client.py``) run in ``python``'s Gym: each
    rollout's answers, step by step."""
    payload = json.dumps(list(rollouts))
    done = subprocess.run(
        [str(python), str(FIXTURES / "gym_client.py")],
        input=payload,
        capture_output=True,
        text=True,
        timeout=300,
        env=gym_env(),
        cwd=tempfile.gettempdir(),  # Gym's Hydra writes outputs/<date>/ under its working directory
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout))


@pytest.fixture(scope="module")
def observed(gym07_python: Path, gym07_server: str, gym07_bridge: BridgeProcess) -> dict[str, list[Any]]:
    """One rollout by Gym 0.7's client with observability on, to the Gym server and to the bridge;
    and the same without observability (bare paths), to both."""
    runs = gym_client(
        gym07_python,
        rollout(gym07_server, STEPS, rollout_id=ROLLOUT),
        rollout(gym07_bridge.url, STEPS, rollout_id=ROLLOUT),
        rollout(gym07_server, STEPS, rollout_id=ROLLOUT, observability=False),
        rollout(gym07_bridge.url, STEPS, rollout_id=ROLLOUT, observability=False),
    )
    return dict(zip(["direct", "bridge", "direct_off", "bridge_off"], runs, strict=True))


def without(body: Any, *keys: str) -> Any:
    return {k: v for k, v in body.items() if k not in keys} if isinstance(body, dict) else body


# -- the environment ------------------------------------------------------------------------------


def test_the_07_env_is_the_builders_and_reports_its_version(gym07_python: Path) -> None:
    stamp = (GYM07_ENV / ".gym-env-stamp").read_text().split()
    assert stamp[0] == "0.7.0"
    assert gym_version(gym07_python) == "0.7.0"
    started = time.monotonic()  # a second build with the same stamp is a no-op
    env = {**os.environ, "NEMO_GYM_VERSION": "0.7.0", "UV": uv()}
    subprocess.run([str(ROOT / "scripts" / "setup-gym-env.sh"), str(GYM07_ENV)], env=env, check=True)
    assert time.monotonic() - started < 10


def test_healthz_reports_the_upstreams_nemo_gym_version(gym07_bridge: BridgeProcess) -> None:
    upstream = gym07_bridge.health()["upstream"]
    assert upstream["gym_version"] == "0.7.0"
    assert upstream["server_class"] == ECHO


# -- Gym 0.7's client with observability on ------------------------------------------------------


def test_gym_client_prefixes_every_request_and_the_bridge_answers_as_the_gym_server(
    observed: dict[str, list[Any]],
) -> None:
    direct, bridged = observed["direct"], observed["bridge"]
    for step in (*direct, *bridged):  # Gym's client did prefix every resources-server request
        assert f"/ng-rollout/{ROLLOUT}{step['path']}" in step["url"], step["url"]
    assert [s["status"] for s in bridged] == [s["status"] for s in direct] == [200] * len(STEPS)
    seed, inc, rollout, value, verify = bridged
    assert without(seed["body"], "mcp") == direct[0]["body"]
    assert seed["body"]["mcp"]["url_path"] == "/mcp"
    assert inc["body"] == direct[1]["body"]
    # the upstream saw the rollout id through the bridge as it does directly (its own middleware)
    assert rollout["body"] == direct[2]["body"] == {"rollout_id": ROLLOUT}
    assert value["body"] == direct[3]["body"] == {"count": 5}
    assert without(verify["body"], "_bridge") == direct[4]["body"]
    assert verify["body"]["reward"] == direct[4]["body"]["reward"] == 1.0


def test_without_observability_paths_are_bare_and_no_rollout_id_is_seen(
    observed: dict[str, list[Any]],
) -> None:
    for step in (*observed["direct_off"], *observed["bridge_off"]):
        assert "/ng-rollout/" not in step["url"]
        assert step["status"] == 200
    assert observed["bridge_off"][2]["body"] == observed["direct_off"][2]["body"] == {"rollout_id": None}
    assert observed["bridge_off"][4]["body"]["reward"] == observed["direct_off"][4]["body"]["reward"]


def test_the_rollout_id_reaches_traces_the_audit_log_and_provenance(
    observed: dict[str, list[Any]], audit_log: Path, gym07_bridge: BridgeProcess
) -> None:
    report = observed["bridge"][4]["body"]["_bridge"]
    assert report["provenance"]["rollout_id"] == ROLLOUT
    assert report["provenance"]["calls"]["call_inc"]["served"] is True
    assert "rollout_id" not in observed["bridge_off"][4]["body"]["_bridge"]["provenance"]
    lines = [json.loads(line) for line in audit_log.read_text().splitlines()]
    prefixed = [line for line in lines if line.get("rollout_id") == ROLLOUT]
    assert {line["tool"] for line in prefixed} == {
        "increment_counter",
        "current_rollout_id",
        "get_counter_value",
    }
    assert sum("rollout_id" not in line for line in lines) == 3  # the run without observability
    time.sleep(0.5)  # the console exporter's batch delay is 100 ms
    spans = spans_in(gym07_bridge.log())
    tagged = {span["name"] for span in spans if span["attributes"].get("gym.rollout_id") == ROLLOUT}
    assert {"POST /seed_session", "POST /increment_counter", "POST /verify", "verify"} <= tagged, tagged


# -- a stranger's rollout id ----------------------------------------------------------------------


def raw_post(
    url: str, path: str, body: bytes = b"{}", headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """POST with the path exactly as given (http.client sends it as it is: no dot-segment removal)."""
    parsed = httpx.URL(url)
    connection = http.client.HTTPConnection(parsed.host, parsed.port, timeout=30)
    try:
        connection.request("POST", path, body, {"content-type": "application/json", **(headers or {})})
        answer = connection.getresponse()
        data = answer.read()
    finally:
        connection.close()
    try:
        return answer.status, json.loads(data)
    except ValueError:
        return answer.status, data.decode(errors="replace")


WORST_IDS = {
    "dot-dot": "/ng-rollout/../seed_session",
    "encoded dot-dot": "/ng-rollout/%2e%2e/seed_session",
    "leading dot": "/ng-rollout/.hidden/seed_session",
    "encoded CRLF header injection": "/ng-rollout/a%0d%0aX-Injected:%201/seed_session",
    "NUL": "/ng-rollout/a%00b/seed_session",
    "non-ASCII": "/ng-rollout/%C3%A9t%C3%A9/seed_session",
    "encoded slash": "/ng-rollout/a%2F..%2Fb/seed_session",
    "empty": "/ng-rollout//seed_session",
    "no path after it": "/ng-rollout/7-3",
    "encoded line break mid-path": "/ng-rollout/7-3/seed%0A_session",
}


@pytest.mark.parametrize("case", sorted(WORST_IDS))
def test_worst_rollout_ids_are_refused_before_the_upstream_and_touch_no_session(
    case: str, gym07_bridge: BridgeProcess, gym07_server: str
) -> None:
    seeded = httpx.post(
        f"{gym07_bridge.url}/ng-rollout/ok-1/seed_session", json={"initial_count": 11}, timeout=30
    )
    token = seeded.json()["mcp"]["headers"][HEADER]
    path = WORST_IDS[case]
    status, body = raw_post(gym07_bridge.url, path, b'{"initial_count": 99}', {HEADER: token})
    assert 400 <= status < 500, (status, body)
    # the bridge's own one-line reason, never the upstream's {"detail": "Not Found"}
    assert isinstance(body, dict) and isinstance(body["detail"], str) and "\n" not in body["detail"], body
    assert body["detail"] != "Not Found"
    if case == "encoded slash":  # a valid id ('a') followed by a path no route has: 404 from routing
        assert status == 404 and raw_post(gym07_server, path)[0] == 404
    else:  # the Gym server refuses the same path too (its middleware does not match, no route does)
        assert status == 404
        assert raw_post(gym07_server, path)[0] in (404, 405)
    # the session the token names was not touched (a seed would have reset nothing, a tool nothing)
    value = httpx.post(f"{gym07_bridge.url}/get_counter_value", json={}, headers={HEADER: token}, timeout=30)
    assert value.json() == {"count": 11}


def test_a_rollout_id_is_a_label_never_a_session(gym07_bridge: BridgeProcess) -> None:
    """Another rollout's id in the prefix acts on the session the token names, and that session
    keeps the id it was seeded under (the provenance says which rollout it served)."""
    seed = httpx.post(
        f"{gym07_bridge.url}/ng-rollout/mine-1/seed_session", json={"initial_count": 0}, timeout=30
    )
    token = seed.json()["mcp"]["headers"][HEADER]
    other = httpx.post(
        f"{gym07_bridge.url}/ng-rollout/theirs-2/seed_session", json={"initial_count": 40}, timeout=30
    )
    other_token = other.json()["mcp"]["headers"][HEADER]
    hit = httpx.post(
        f"{gym07_bridge.url}/ng-rollout/theirs-2/increment_counter",
        json={"count": 1},
        headers={HEADER: token},
        timeout=30,
    )
    assert hit.status_code == 200
    count = httpx.post(
        f"{gym07_bridge.url}/get_counter_value", json={}, headers={HEADER: other_token}, timeout=30
    )
    assert count.json() == {"count": 40}
    # /mcp under a prefix is served too (as by Gym's server); an MCP call carries its session's rollout id
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    call["params"] = {"name": "current_rollout_id", "arguments": {}}
    rpc = httpx.post(
        f"{gym07_bridge.url}/ng-rollout/theirs-2/mcp",
        json=call,
        headers={**MCP_HEADERS, HEADER: token},
        timeout=30,
    )
    assert rpc.json()["result"]["structuredContent"] == {"rollout_id": "mine-1"}
    verify = httpx.post(
        f"{gym07_bridge.url}/verify",
        json={
            **counter_row(0, 1),
            "response": response_with(
                {"call_id": "c1", "name": "increment_counter", "arguments": '{"count": 1}'}
            ),
        },
        headers={HEADER: token},
        timeout=60,
    )
    assert verify.json()["reward"] == 1.0
    assert verify.json()["_bridge"]["provenance"]["rollout_id"] == "mine-1"


def test_a_request_relayed_to_the_owner_replica_keeps_its_rollout_id(
    spawn_bridge: Any, gym07_server: str
) -> None:
    """Two replicas on the Gym 0.7 server: a prefixed call naming a session of replica A, sent to B,
    is relayed to A with its prefix, and the upstream sees that rollout's id (its own echo)."""
    ports = [procs.free_port(), procs.free_port()]
    a, b = (
        spawn_bridge(["--upstream-url", gym07_server, "--advertise-url", f"http://127.0.0.1:{p}"], port=p)
        for p in ports
    )
    seed = httpx.post(f"{a.url}/ng-rollout/7-3/seed_session", json={"initial_count": 0}, timeout=30)
    token = seed.json()["mcp"]["headers"][HEADER]

    def echo(url: str) -> Any:
        answer = httpx.post(url, json={}, headers={HEADER: token}, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()["rollout_id"]

    assert echo(f"{b.url}/ng-rollout/7-9/current_rollout_id") == "7-9"  # relayed by B, prefix kept
    assert echo(f"{b.url}/current_rollout_id") == "7-3"  # no prefix: the session's own rollout
    assert echo(f"{a.url}/ng-rollout/8-1/current_rollout_id") == "8-1"


# -- version skew: a Gym 0.7 client, a nemo-gym 0.4.0 upstream -------------------------------------


def test_a_07_client_against_a_04_upstream_is_told_why(
    gym07_python: Path, counter_bridge: BridgeProcess, gym_upstream: Any
) -> None:
    """Gym 0.7's client, observability on, against the bridge on nemo-gym 0.4.0 (``make setup``): the
    prefix is served (0.4.0 has no rollout middleware: the bridge sends bare paths), and the verify
    422 is the upstream's own answer plus one line naming the skew. Expected detail: the same Gym
    client straight to a nemo-gym 0.4.0 server (bare paths: that server would 404 a prefix)."""
    steps = [step for step in STEPS if step[0] != "/current_rollout_id"]
    bridged, direct = gym_client(
        gym07_python,
        rollout(counter_bridge.url, steps, rollout_id=ROLLOUT),
        rollout(gym_upstream().url, steps, observability=False),
    )
    assert [s["status"] for s in direct] == [200, 200, 200, 422]
    assert [s["status"] for s in bridged] == [200, 200, 200, 422]
    assert f"/ng-rollout/{ROLLOUT}/verify" in bridged[-1]["url"]
    answer = bridged[-1]["body"]
    assert answer["detail"] == direct[-1]["body"]["detail"]  # the upstream's answer, kept whole
    note = answer["_bridge"]["version_skew"]
    version = counter_bridge.health()["upstream"]["gym_version"]
    assert version == "0.4.0"
    assert note.startswith(
        f"upstream nemo-gym {version} refused fields that only a newer Gym's client sends ("
    )
    refused = {".".join(map(str, item["loc"][-2:])) for item in direct[-1]["body"]["detail"]}
    assert refused and all(field in note for field in refused)
    assert "\n" not in note and "make gym-env NEMO_GYM_VERSION=0.7.0" in note


def test_a_genuinely_bad_field_gets_no_skew_note(counter_bridge: BridgeProcess) -> None:
    body = {**counter_row(1), "response": response_with()}
    body["responses_create_params"] = {**body["responses_create_params"], "not_a_gym_field": 1}
    answer = httpx.post(f"{counter_bridge.url}/verify", json=body, timeout=60)
    assert answer.status_code == 422
    assert "_bridge" not in answer.json()
    assert answer.json()["detail"][0]["loc"][-1] == "not_a_gym_field"
