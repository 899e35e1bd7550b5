"""The instruments under the per-call benchmark (``benchmarks/calls.py``): the bare upstream answers
as Gym's counter server does, the ``asgi`` floor (the bridge's own HTTP stack, ``benchmarks/floors.py``)
relays from the moment it names its port, and a run without nginx still plots."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import client, floors, procs, report
from bridge import tools
from tests.fixtures.bridges import GYM_PYTHON, ROOT

ROW = {"responses_create_params": {"input": []}}
RESPONSE = {
    "id": "r",
    "created_at": 0,
    "model": "m",
    "object": "response",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


def _post(url: str, body: object, cookie: str | None) -> tuple[int, object, str | None]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"content-type": "application/json"}
    )
    if cookie:
        request.add_header("cookie", cookie)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw, headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        status, raw, headers = exc.code, exc.read(), exc.headers
    set_cookie = headers.get("set-cookie")
    return status, json.loads(raw), set_cookie.split(";", 1)[0] if set_cookie else None


def _play(url: str) -> list[tuple[int, object, bool]]:
    """One rollout and its edge cases; (status, answer, whether a session cookie was set) per call."""
    out = []
    status, answer, cookie = _post(f"{url}/seed_session", {**ROW, "initial_count": 3}, None)
    out.append((status, answer, cookie is not None))
    other = _post(f"{url}/seed_session", {**ROW, "initial_count": 40}, None)[2]
    calls = [
        ("increment_counter", {"count": 2}, cookie),
        ("increment_counter", {"count": 5}, other),
        ("get_counter_value", None, cookie),
        ("get_counter_value", {}, other),
        ("verify", {**ROW, "response": RESPONSE, "expected_count": 5}, cookie),
        ("verify", {**ROW, "response": RESPONSE, "expected_count": 6}, cookie),
        ("increment_counter", {"count": 4}, None),  # no cookie: a new session at 0
        ("get_counter_value", {}, None),
        ("verify", {**ROW, "response": RESPONSE, "expected_count": 0}, None),  # unknown session: 0.0
        ("increment_counter", {"count": "x"}, cookie),  # a validation error, nothing counted
        ("get_counter_value", {}, cookie),
    ]
    for tool, body, jar in calls:
        status, answer, set_cookie = _post(f"{url}/{tool}", body, jar)
        if tool == "verify" and status == 200:  # Gym echoes its models' defaults too: compare the contract
            assert isinstance(answer, dict)
            answer = {"reward": answer["reward"], "keys": sorted(answer)}
        if status == 422:
            answer = "validation error"
        out.append((status, answer, set_cookie is not None))
    return out


@pytest.fixture(scope="module")
def bare_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("bare")
    proc = procs.start_bare_upstream(workdir)
    try:
        yield proc.url
    finally:
        proc.stop()


@pytest.mark.timeout(300)
def test_bare_upstream_answers_as_gyms_counter_server(bare_upstream: str, tmp_path: Path) -> None:
    """The same calls against Gym's real ``example_session_state_mgmt`` (the reference) and the
    benchmark's bare upstream give the same statuses, answers and session cookies; and the bridge
    reads the same counter tools from both OpenAPI documents (the bare one adds ``echo``)."""
    if not GYM_PYTHON.exists():
        pytest.skip("the Gym environment is missing: run 'make setup'")
    gym = procs.start_upstream(tmp_path)
    try:
        reference = _play(gym.url)
        with urllib.request.urlopen(f"{gym.url}/openapi.json", timeout=10) as response:
            gym_tools = tools.from_openapi(json.loads(response.read()))[0].tools
    finally:
        gym.stop()
    assert reference[3][1] == {"count": 5} and reference[5][1] == {
        "reward": 1.0,
        "keys": ["response", "responses_create_params", "reward"],
    }
    assert _play(bare_upstream) == reference
    with urllib.request.urlopen(f"{bare_upstream}/openapi.json", timeout=10) as response:
        bare_tools = tools.from_openapi(json.loads(response.read()))[0].tools
    assert set(bare_tools) == {*gym_tools, "echo"}
    for name, spec in gym_tools.items():
        assert bare_tools[name].input_schema.get("required", []) == spec.input_schema.get("required", [])
    payload = "é" * 70000
    assert _post(f"{bare_upstream}/echo", {"data": payload}, None)[1] == {"data": payload}


@pytest.mark.timeout(120)
def test_the_asgi_floor_accepts_as_soon_as_it_names_its_port(bare_upstream: str, tmp_path: Path) -> None:
    """The floor is used the moment ``start_asgi`` has read its port line: a connection made then is
    accepted and relayed by the bridge's own forwarding code, the upstream's answer and cookie intact
    (the floor once printed its port before listening, and a profile of it alone was refused)."""
    proc = floors.start_asgi(tmp_path, bare_upstream)
    try:
        host, port = proc.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(client.request("/seed_session", client.seed_body(3), {"host": proc.url[7:]}))
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert b"set-cookie:" in answer.lower()
    finally:
        proc.stop()


def test_a_run_without_nginx_plots_without_its_ratio(tmp_path: Path) -> None:
    """``--paths`` without nginx (the forwarding question, or a subset) has no ratio to nginx: the
    plot leaves that panel's points out instead of failing after the run."""
    published = report.load(ROOT / "benchmarks" / "results" / "forwarding.json")
    rows = report.summarize_calls(published["runs"])
    assert rows and all(row["ratio_nginx"] is None for row in rows)
    report.plot_calls(rows, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_published_tables_are_their_runs_summarized() -> None:
    """The committed per-call and forwarding results (what docs/performance.md cites) hold their
    rounds, and their summaries are exactly what the report module computes from them again."""
    for name in ("calls", "forwarding"):
        published = report.load(ROOT / "benchmarks" / "results" / f"{name}.json")
        assert published["correct"] is True and published["runs"]
        assert all(r["counters_exact"] == r["sessions"] for r in published["runs"])
        assert json.loads(json.dumps(report.summarize_calls(published["runs"]))) == published["summary"]
