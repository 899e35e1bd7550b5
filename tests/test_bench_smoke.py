"""Each benchmark question runs end to end with tiny counts through the one runner
(``make bench ARGS="<question> ..."``, ``benchmarks/run.py``): it prints its table, writes its JSON,
every figure it reports is there, and a wrong answer fails it. Nothing timed is asserted; the
training-run questions are in ``tests/test_soak_bench.py``. The runs end to end are marked ``soak``
(tests/README.md); the checks that a wrong figure fails run on the fast road too."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import calls, collector, footprint, long_tools, procs, run
from benchmarks.floors import NGINX
from benchmarks.procs import free_port
from tests.fixtures.bridges import ROOT

EXACT = "correctness: every answer checked, every counter read back exact after each run"


def _needs_nginx() -> None:
    if not NGINX.exists():
        if os.environ.get("CI") == "true":  # a green CI must have run it: .ci/run installs nginx
            pytest.fail(f"{NGINX} is missing under CI=true: scripts/setup-nginx.sh installs it")
        pytest.skip(f"{NGINX} is missing: run scripts/setup-nginx.sh")


def _bench(*argv: str, timeout: int = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.run", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_runner_names_every_question() -> None:
    """``make bench ARGS=--help`` lists the questions; an unknown one is refused with that list."""
    for question in run.QUESTIONS:
        assert f"    {question} " in (run.__doc__ or "")
    assert run.main(["--help"]) == 0
    assert run.main(["capacity"]) == 2  # a question that is no more: refused, not run


@pytest.mark.soak
@pytest.mark.timeout(420)
def test_calls_quick(tmp_path: Path) -> None:
    """Two rounds at 1 and 16 sessions and the 64 KiB workload at 1: every path gives a figure and an
    interval, every counter reads back exact, each target has one status, the plot is written, and
    ``--from-json`` renders the same table again from the saved rounds."""
    _needs_nginx()
    out, plot = tmp_path / "calls.json", tmp_path / "calls.png"
    argv = ["--rounds", "2", "--levels", "1,16", "--size-levels", "1", "--calls", "64", "--size-calls", "8"]
    ran = _bench("calls", *argv, "--json", str(out), "--plot", str(plot))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert EXACT in ran.stdout
    report = json.loads(out.read_text())
    assert report["correct"] is True and report["error"] == ""
    assert len(report["machine"]["loadavg_at_start"]) == 3 and "nginx" in report["machine"]["nginx"]
    assert {(r["workload"], r["sessions"], r["path"], r["round"]) for r in report["runs"]} == {
        (w, n, p, r) for w, n in (("16B", 1), ("16B", 16), ("64KB", 1)) for p in calls.PATHS for r in (0, 1)
    }
    assert all(r["counters_exact"] == r["sessions"] and r["calls_per_s"] > 0 for r in report["runs"])
    rows = {(r["workload"], r["sessions"], r["path"]): r for r in report["summary"]}
    assert len(rows) == 3 * len(calls.PATHS)
    for (workload, _, path), row in rows.items():
        assert row["calls_per_s"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0
        assert row["client_busy"] > 0 and row["upstream_busy"] > 0
        if path != "direct":
            assert row["server_cpu_ms_per_call"] > 0 and row["calls_per_s_per_server_core"] > 0
            median, low, high = row["server_cpu_ci"]
            assert median == row["server_cpu_ms_per_call"] and 0 < low <= median <= high
        if path not in ("direct", "nginx"):
            median, low, high = row["ratio_nginx"]
            assert median > 0 and 0 < low <= high
        if workload == "64KB":
            assert set(row["us_per_kb"]) == set(row["cpu_ms_per_call"])
    table = ran.stdout.split("targets (reported, not asserted):")[1]
    for target in ("bridge CPU <= 0.25 ms per MCP tools/call", "owner >= 0.9 of nginx's calls/s"):
        lines = [line for line in table.splitlines() if target in line]
        assert lines and all(line.split("|")[-2].strip() in ("met", "not met") for line in lines)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = _bench("calls", "--from-json", str(out), timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ran.stdout.split("\njson: ")[0] + "\n"


@pytest.mark.soak
@pytest.mark.timeout(300)
def test_forwarding_quick(tmp_path: Path) -> None:
    """The owner and the non-owner in the same rounds: the non-owner's CPU apart from the owner's,
    forwarded ÷ owner and the latency added, each with an interval; every counter exact."""
    out = tmp_path / "forwarding.json"
    ran = _bench("forwarding", "--quick", "--size-levels", "", "--calls", "60", "--json", str(out))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert EXACT in ran.stdout and "non-owner CPU <= 0.15 ms per forwarded call" in ran.stdout
    report = json.loads(out.read_text())
    assert {r["path"] for r in report["runs"]} == {"mcp", "fwd"}
    for row in (r for r in report["summary"] if r["path"] == "fwd"):
        assert row["cpu_ms_per_call"]["peer"] > 0 and row["cpu_ms_per_call"]["owner"] > 0
        assert row["server_cpu_ms_per_call"] == row["cpu_ms_per_call"]["peer"]
        assert row["ratio_owner"][0] > 0 and len(row["added_p99_ms_over_owner"]) == 3
        assert row["ratio_nginx"] is None


def test_a_wrong_count_fails_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any) -> None:
    """The read-back is real: calls that each add 2 while the benchmark counts 1 leave every counter
    off, and the run stops with exit 1 and the session's figures in its reason."""
    real = calls.Bench._call

    def doubled(path: str, session: Any, tool: str, arguments: dict[str, Any]) -> bytes:
        return real(path, session, tool, {"count": 2} if tool == "increment_counter" else arguments)

    monkeypatch.setattr(calls.Bench, "_call", staticmethod(doubled))
    out = tmp_path / "calls.json"
    code = run.main(
        ["calls", "--paths", "mcp", "--rounds", "1", "--levels", "1", "--size-levels", "", "--json", str(out)]
    )
    assert code == 1
    report = json.loads(out.read_text())
    assert report["correct"] is False and "read {'count':" in report["error"]
    assert "correctness: FAILED" in capsys.readouterr().out


@pytest.mark.soak
@pytest.mark.timeout(300)
def test_footprint_quick(tmp_path: Path) -> None:
    """``make bench ARGS=footprint`` in small: one restart against the bare upstream answers a seeded
    session's tools/call exactly, 300 idle sessions read back exact, and the import split and the
    floors of the same round are there: the bare interpreter starts faster than a process that
    imports the MCP SDK's server (figures are reported, none is asserted)."""
    _needs_nginx()
    out = tmp_path / "footprint.json"
    ran = _bench("footprint", "--restarts", "1", "--sessions", "300", "--json", str(out), timeout=280)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = json.loads(out.read_text())
    assert report["idle"]["correct"] is True and report["idle"]["sessions"] == 250
    assert 0 < report["ready_s_median"] <= report["first_answer_s_median"]
    assert 0 < report["imports"]["mcp_sdk_ms"] < report["imports"]["all_ms"]
    assert 0 < report["interpreter_s_median"] < report["sdk_server_import_s_median"]
    assert report["nginx_ready_s_median"] > 0 and report["nginx"]
    assert report["idle"]["bridge_rss_growth_bytes_per_session"] > 0
    for line in (
        "restart to /readyz 200",
        "B/session",
        "floor: Python importing the MCP SDK's server",
        "ready / this floor",
    ):
        assert line in ran.stdout


def test_a_wrong_idle_session_fails_the_footprint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The idle sessions' read-back is real: sessions seeded one off what the benchmark expects read
    back wrong, and the figure is reported as not exact (``make bench`` then exits 1)."""
    real = footprint.seed
    monkeypatch.setattr(footprint, "seed", lambda http, url, initial: real(http, url, initial + 1))
    upstream = procs.start_bare_upstream(tmp_path)
    try:
        result = footprint.idle(tmp_path, upstream, 80)
    finally:
        upstream.stop()
    assert result["sessions"] == 30 and result["correct"] is False


def test_the_collector_counts_every_reward_unlike_the_references() -> None:
    """The collector benchmark compares each bridged reward with the reference rollout of the same
    (row, repeat): a different reward and a missing rollout are each a mismatch, and a reference
    off its planned reward is counted apart."""

    def collected(rewards: dict[tuple[int, int], float]) -> collector.Collection:
        return collector.Collection({k: {"reward": v} for k, v in rewards.items()}, 1.0, None)

    plan = [1.0, 0.0]
    planned = {(0, 0): 1.0, (0, 1): 1.0, (1, 0): 0.0, (1, 1): 0.0}
    reference = collected(planned)
    same = collector.compare(collected(planned), reference, plan, 2)
    assert same["mismatches"] == 0 and same["compared"] == 4 and same["reference"]["off_plan"] == 0
    assert same["bridged"]["rewards"] == {"0.0": 2, "1.0": 2}
    wrong = collector.compare(collected({**planned, (1, 1): 1.0}), reference, plan, 2)
    assert wrong["mismatches"] == 1
    assert wrong["mismatch_rows"] == [{"row": 1, "repeat": 1, "bridge": 1.0, "reference": 0.0}]
    missing = collector.compare(
        collected({k: v for k, v in planned.items() if k != (0, 1)}), reference, plan, 2
    )
    assert missing["mismatches"] == 1 and missing["bridged"]["collected"] == 3
    off = collector.compare(collected(planned), collected({**planned, (0, 0): 0.0}), plan, 2)
    assert off["reference"]["off_plan"] == 1 and off["mismatches"] == 1


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    """A port handed to a server that binds it later must be one no outgoing connection can take
    meanwhile: the kernel gives connections their local port from ``ip_local_port_range``."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low <= 12000:
        pytest.skip(f"this kernel's ephemeral range starts at {low}: no room below it")
    ports = [free_port() for _ in range(200)]
    assert all(10000 <= port < low for port in ports), ports
    assert len(set(ports)) == len(ports)  # never the same port twice in one process
    for port in ports[:20]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # and nothing listens there


@pytest.mark.soak
@pytest.mark.timeout(300)
def test_long_tools_quick(tmp_path: Path) -> None:
    """``make bench ARGS=long-tools`` in small: Gym alone, two replicas and one in the same run, every
    rollout exact, every call in the upstream at once on each path (the fixture's own count), none
    queued in a bridge, and each figure there: speed and p99 against Gym alone, bridge CPU, the
    descriptors before, at the peak and after."""
    out = tmp_path / "long-tools.json"
    argv = [
        "--rollouts",
        "12",
        "--min-s",
        "0.5",
        "--max-s",
        "2",
        "--cpu-durations",
        "0.5,1",
        "--cpu-rollouts",
        "6",
    ]
    ran = _bench("long-tools", *argv, "--json", str(out), timeout=280)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "every reward exact: True" in ran.stdout
    report = json.loads(out.read_text())
    assert [s["path"] for s in report["steps"]] == ["gym", "x2", "x1"]
    for step in report["steps"]:
        assert step["lost"] == 0 and step["upstream_peak"] == 12 and step["p99_s"] >= step["p50_s"] > 0
        assert step["makespan_vs_gym"] > 0 and step["p99_vs_gym"] > 0
    for step in report["steps"][1:] + report["cpu_by_duration"]:
        assert step["cpu_ms"] > 0 and step["queued"] == 0
        for bridge in step["fds"].split("/"):
            before, peak, after = map(int, bridge.split("-"))
            assert peak >= before > 0 and after > 0
    assert [s["rollouts"] for s in report["cpu_by_duration"]] == [6, 6]


def test_a_lost_rollout_fails_long_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The reward is read back: verifies that expect two calls where each rollout made one score 0.0,
    every rollout of every path is counted lost with its reason, and the run exits 1."""
    monkeypatch.setattr(
        long_tools, "VERIFY", long_tools.VERIFY.replace(b'"expected_count":1', b'"expected_count":2')
    )
    out = tmp_path / "long-tools.json"
    argv = ["--rollouts", "4", "--min-s", "0.1", "--max-s", "0.3", "--cpu-durations", "", "--json", str(out)]
    assert run.main(["long-tools", *argv]) == 1
    report = json.loads(out.read_text())
    assert report["exact"] is False
    assert [(s["lost"], s["reasons"]) for s in report["steps"]] == [(4, {"verify reward 0.0": 4})] * 3


def test_long_tools_draws_heavy_tailed_durations_the_same_each_run() -> None:
    """The step's durations: seeded (every path gets the same), within the bounds, heavy-tailed."""
    drawn = long_tools.durations(4096, 1.0, 120.0, 1.0, seed=7)
    assert (
        drawn
        == long_tools.durations(4096, 1.0, 120.0, 1.0, seed=7)
        != long_tools.durations(4096, 1.0, 120.0, 1.0, 8)
    )
    assert min(drawn) >= 1.0 and max(drawn) <= 120.0
    ordered = sorted(drawn)  # the median about 2 s, the slowest 1 % past 40 s
    assert ordered[len(drawn) // 2] < 3 and ordered[-len(drawn) // 100] > 40
