"""The capacity benchmark (``benchmarks/capacity.py``): its bare upstream answers as Gym's counter
server does, and the benchmark runs end to end with tiny counts, every path producing a figure and
every counter read back exact. Nothing timed is asserted."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import capacity_report, procs, raw_http
from benchmarks.capacity import PATHS
from benchmarks.clients import TOKEN_HEADER
from benchmarks.nginx import NGINX
from bridge import tools
from bridge.http.forwarding import MARKER
from tests.conftest import GYM_PYTHON, ROOT

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


@pytest.mark.timeout(420)
def test_capacity_quick(tmp_path: Path) -> None:
    """Two rounds at 1 and 16 sessions and the 64 KiB workload at 1: every path gives a figure and
    an interval, every counter reads back exact after every run, the JSON has its fields, the plot
    is written, and ``--from-json`` renders the same table again from the saved rounds."""
    if not NGINX.exists():
        if os.environ.get("CI") == "true":  # a green CI must have run it: .ci/run installs nginx
            pytest.fail(f"{NGINX} is missing under CI=true: scripts/setup-nginx.sh installs it")
        pytest.skip(f"{NGINX} is missing: run scripts/setup-nginx.sh")
    out, plot = tmp_path / "capacity.json", tmp_path / "capacity.png"
    argv = ["--rounds", "2", "--levels", "1,16", "--size-levels", "1", "--calls", "64", "--size-calls", "8"]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.run",
            "capacity",
            *argv,
            "--silent",
            "--json",
            str(out),
            "--plot",
            str(plot),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "correctness: every answer checked, every counter read back exact after each run" in run.stdout
    report = json.loads(out.read_text())
    assert report["correct"] is True and report["error"] == ""
    assert len(report["loadavg_at_start"]) == 3 and "nginx" in report["machine"]["nginx"]
    runs = report["runs"]
    assert {(r["workload"], r["sessions"], r["path"], r["round"]) for r in runs} == {
        (w, n, p, r) for w, n in (("16B", 1), ("16B", 16), ("64KB", 1)) for p in PATHS for r in (0, 1)
    }
    assert all(r["counters_exact"] == r["sessions"] and r["calls_per_s"] > 0 for r in runs)
    rows = {(r["workload"], r["sessions"], r["path"]): r for r in report["summary"]}
    assert len(rows) == 3 * len(PATHS)
    for (workload, _, path), row in rows.items():
        assert row["calls_per_s"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0
        assert row["client_busy"] > 0 and row["upstream_busy"] > 0
        if path != "direct":
            assert row["server_cpu_ms_per_call"] > 0 and row["calls_per_s_per_server_core"] > 0
            median, low, high = row["server_cpu_ci"]
            assert median == row["server_cpu_ms_per_call"] and 0 < low <= median <= high
            assert len(row["added_p99_ms_over_direct"]) == 3
        if path not in ("direct", "nginx"):
            median, low, high = row["ratio_nginx"]
            assert median > 0 and 0 < low <= high
        if path in ("fwd", "fwd-splice"):
            assert row["ratio_owner"][0] > 0 and row["cpu_ms_per_call"]["owner"] > 0
        if workload == "64KB":
            assert set(row["us_per_kb"]) == set(row["cpu_ms_per_call"])
    assert "targets (reported, not asserted):" in run.stdout
    assert "floors, same rounds" in run.stdout
    assert all(f"with {p}" in run.stdout for p in ("splice", "asgi", "nginx"))
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = subprocess.run(
        [sys.executable, "-m", "benchmarks.capacity", "--from-json", str(out), "--plot", ""],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == run.stdout.split("\njson: ")[0] + "\n"


@pytest.mark.timeout(300)
def test_footprint_quick(tmp_path: Path) -> None:
    """``make bench ARGS=footprint`` in small: one restart against the bare upstream answers a seeded
    session's tools/call exactly, 300 idle sessions read back exact, and the import split and the
    floors of the same round are there: the bare interpreter starts faster than a process that
    imports the MCP SDK's server (figures are reported, none is asserted)."""
    out = tmp_path / "footprint.json"
    argv = ["footprint", "--restarts", "1", "--sessions", "300", "--json", str(out)]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", *argv], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    assert report["idle"]["correct"] is True and report["idle"]["sessions"] == 250
    assert 0 < report["ready_s_median"] <= report["first_answer_s_median"]
    assert 0 < report["imports"]["mcp_sdk_ms"] < report["imports"]["all_ms"]
    assert 0 < report["interpreter_s_median"] < report["sdk_server_import_s_median"]
    assert report["nginx_ready_s_median"] > 0 and report["nginx"]
    assert "bytes per session" in run.stdout and "restart to ready" in run.stdout
    assert "the bridge's ready over the SDK floor" in run.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["bytes", "splice", "asgi"])
def test_each_python_floor_accepts_as_soon_as_it_names_its_port(
    mode: str, bare_upstream: str, tmp_path: Path
) -> None:
    """A floor is used the moment ``start_relay`` has read its port line: a connection made then is
    accepted and relayed, however long the server behind the socket takes to start (the ``asgi``
    floor once printed its port before listening, and a profile of it alone was refused)."""
    proc = procs.start_relay(tmp_path, bare_upstream, mode)
    try:
        host, port = proc.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(raw_http.request("/seed_session", json.dumps(ROW).encode(), {"host": proc.url[7:]}))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    finally:
        proc.stop()


def _exchange(url: str, request: bytes) -> bytes:
    """The raw answer to one request on a fresh connection; b"" when the server closed it unanswered."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


@pytest.mark.timeout(180)
def test_the_forward_floor_relays_only_what_a_non_owner_relays(bare_upstream: str, tmp_path: Path) -> None:
    """The ``fwd-splice`` floor does a non-owner's checks, not less: a call for the owner's session
    comes back as a real non-owner replica relays it, byte for byte in the body, and what that
    replica refuses (a foreign Host, the loop marker, a body nested too deep, a forged token) the
    floor does not relay (it closes the connection; a floor, not a server)."""
    owner = procs.start_bridge(tmp_path, bare_upstream, name="owner")
    peer = procs.start_bridge(tmp_path, bare_upstream, name="peer")
    floor = procs.start_relay(tmp_path, owner.url, "forward")
    try:
        seeded = _exchange(
            owner.url,
            raw_http.request(
                "/seed_session", json.dumps({**ROW, "initial_count": 9}).encode(), {"host": owner.url[7:]}
            ),
        )
        token = json.loads(seeded.split(b"\r\n\r\n", 1)[1])["mcp"]["headers"][TOKEN_HEADER]
        call = json.dumps(
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "get_counter_value"}}
        )
        accept = {"accept": "application/json, text/event-stream", TOKEN_HEADER: token}

        def one(proc: procs.Proc, body: str, headers: dict[str, str]) -> bytes:
            request = raw_http.request("/mcp", body.encode(), {"host": proc.url[7:], **accept, **headers})
            return _exchange(proc.url, request)

        def both(body: str, **headers: str) -> tuple[bytes, bytes]:
            return one(peer, body, headers), one(floor, body, headers)

        by_peer, by_floor = both(call)
        assert by_peer.startswith(b"HTTP/1.1 200 ") and by_floor.startswith(b"HTTP/1.1 200 ")
        assert b'"structuredContent":{"count":9}' in by_peer
        assert by_floor.split(b"\r\n\r\n", 1)[1] == by_peer.split(b"\r\n\r\n", 1)[1]
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        refused = {
            "a foreign Host": both(call, host="evil.example"),
            "the loop marker": both(call, **{MARKER: "http://127.0.0.1:9"}),
            "a body nested too deep": both(call[:-1] + ', "x": ' + "[" * 100 + "]" * 100 + "}"),
            "a forged token": both(call, **{TOKEN_HEADER: forged}),
        }
        for what, (by_peer, by_floor) in refused.items():
            assert not by_peer.startswith(b"HTTP/1.1 200 ") or b'"isError":true' in by_peer, what
            assert by_floor == b"", what
    finally:
        for proc in (floor, peer, owner):
            proc.stop()


def test_a_run_without_nginx_plots_without_its_ratio(tmp_path: Path) -> None:
    """``--paths`` without nginx (a subset, as a profile or a quick look runs it) has no ratio to
    nginx: the plot leaves that panel's points out instead of failing after the run."""
    published = json.loads((ROOT / "benchmarks" / "results" / "capacity.json").read_text())
    runs = [r for r in published["runs"] if r["path"] in ("asgi", "fwd", "mcp")]
    rows = capacity_report.summarize(runs, 0)
    assert rows and all(row["ratio_nginx"] is None for row in rows)
    assert capacity_report.plot(rows, tmp_path / "plot.png") is None
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(300)
def test_a_baseline_revision_is_measured_in_the_same_rounds(tmp_path: Path) -> None:
    """``--baseline REV`` runs the bridge paths a second time on REV's bridge, interleaved with the
    checkout's: each path has its baseline row, every counter reads back exact on both, and the
    report gives CPU per call ÷ the baseline's as a median with its interval."""
    out = tmp_path / "capacity.json"
    argv = ["--paths", "mcp,fwd", "--baseline", "HEAD", "--rounds", "3", "--levels", "1,4"]
    argv += ["--size-levels", "", "--calls", "40", "--silent", "--plot", "", "--json", str(out)]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.capacity", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert report["baseline"] == f"HEAD ({head.stdout.strip()})"
    assert {(r["sessions"], r["path"]) for r in report["runs"]} == {
        (n, p) for n in (1, 4) for p in ("mcp", "fwd", "mcp@base", "fwd@base")
    }
    assert all(r["counters_exact"] == r["sessions"] for r in report["runs"])
    rows = {(r["sessions"], r["path"]): r for r in report["summary"]}
    for sessions in (1, 4):
        base = rows[(sessions, "fwd@base")]
        assert (
            base["label"] == "baseline MCP via non-owner (fwd)" and base["cpu_ms_per_call"]["owner@base"] > 0
        )
        for path in ("mcp", "fwd"):
            median, low, high = rows[(sessions, path)]["ratio_baseline_cpu"]
            assert 0 < low <= median <= high
            assert rows[(sessions, f"{path}@base")]["ratio_baseline_cpu"] is None
    assert f"against the baseline HEAD ({head.stdout.strip()})" in run.stdout


@pytest.mark.timeout(120)
def test_the_baseline_replicas_run_the_revisions_bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baseline's replicas import ``bridge`` from the unpacked revision, not from the checkout they
    are started in: a line added to the unpacked copy runs in the baseline's replicas only."""
    from benchmarks.capacity import Capacity
    from benchmarks.revisions import unpack_bridge

    tree = unpack_bridge("HEAD", tmp_path / "baseline")
    marks = tmp_path / "imported-by"
    init = tree / "bridge" / "__init__.py"
    init.write_text(
        init.read_text() + "\nimport os\nwith open(os.environ['BASELINE_MARK'], 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
    )
    monkeypatch.setenv("BASELINE_MARK", str(marks))
    bench = Capacity(tmp_path, lambda text: None)
    try:
        bench.start(["mcp", "fwd", "mcp@base", "fwd@base"], tree)
        pids = {int(line) for line in marks.read_text().split()}
        assert pids == {bench.procs["owner@base"].pid, bench.procs["peer@base"].pid}
    finally:
        bench.stop()
    with pytest.raises(procs.BenchError, match="--baseline no-such-revision"):
        unpack_bridge("no-such-revision", tmp_path / "nothing")


def test_a_path_and_its_baseline_run_back_to_back_taking_turns() -> None:
    """Every round runs every path once; a path and its baseline are neighbours, each first in half
    the rounds; every path leads a round in turn."""
    from benchmarks.capacity import round_order

    paths = [*PATHS, "rest@base", "mcp@base", "fwd@base"]
    orders = [round_order(paths, r) for r in range(22)]
    assert all(sorted(order) == sorted(paths) for order in orders)
    for path in ("rest", "mcp", "fwd"):
        spots = [(order.index(path), order.index(f"{path}@base")) for order in orders]
        assert all(abs(mine - base) == 1 for mine, base in spots)
        assert sum(mine < base for mine, base in spots) == len(orders) // 2
    assert {order[0].partition("@")[0] for order in orders} == set(PATHS)
    assert [round_order(PATHS, r)[0] for r in range(len(PATHS))] == PATHS
