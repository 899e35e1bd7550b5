"""The benchmark runs end to end with tiny counts: it prints its table, writes JSON, and the per-session
counters it checks come out exact (``make bench`` runs the real sizes; CI does not)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GYM_PYTHON, ROOT, free_port


@pytest.mark.timeout(420)
def test_benchmark_quick_subset(tmp_path: Path) -> None:
    if not GYM_PYTHON.exists():
        pytest.skip("the Gym environment is missing: run 'make setup'")
    out = tmp_path / "bench.json"
    argv = "--quick --paths direct,bridge,bridge-2026,gym07 --seq-calls 40 --sessions 4 --calls 10 --warmup 8"
    argv += " --idle-sessions 20 --startup-repeats 1 --client-calls 50 --client-repeats 1"
    argv += " --hops 1x20,2x10 --hops-rounds 1"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", *argv.split(), "--sweep", "", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=410,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "sequential: 1 session x 40 calls" in run.stdout
    assert "bridge MCP, raw JSON-RPC (handshake era)" in run.stdout
    assert "correctness: every session final counter exact" in run.stdout
    report = json.loads(out.read_text())
    assert report["correct"] is True
    paths = {s["path"] for s in report["summary"]}
    assert paths == {"direct", "bridge", "bridge-2026", "gym07"}  # Gym 0.7's own MCP booted, not skipped
    assert all(s["correct"] for s in report["summary"])
    assert report["idle_sessions"]["sessions"] == 20
    # startup measured both ways: restarted against the running upstream, and spawned together with one
    assert "bridge and upstream started together: bridge ready" in run.stdout
    assert "bridge (re)started against a running upstream, spawn to ready" in run.stdout
    (together,) = report["co_start"]
    assert together["upstream_ready_s"] > 0 and together["bridge_ready_s"] > 0
    # the synchronous-client hops: every path at both session counts, each with a ratio to direct HTTP
    assert "synchronous keep-alive client (http.client)" in run.stdout
    hops = report["hops"]["summary"]
    assert {(h["sessions"], h["path"]) for h in hops} == {
        (n, p) for n in (1, 2) for p in ("direct", "relay", "asgi", "owner", "fwd", "svc2", "svc3")
    }
    assert all(h["ratio_direct"] > 0 and h["cpu_ms_per_call"]["upstream"] > 0 for h in hops)
    for control in ("relay", "asgi"):  # each control relay's own CPU, apart from the upstream's
        row = next(h for h in hops if h["path"] == control and h["sessions"] == 1)
        assert set(row["cpu_ms_per_call"]) == {"upstream", control}
        assert row["cpu_ms_per_call"][control] > 0 and row["ratio_owner"] is None
    fwd = next(h for h in hops if h["path"] == "fwd" and h["sessions"] == 1)
    assert set(fwd["cpu_ms_per_call"]) == {"upstream", "replica-0", "replica-1"}


@pytest.mark.timeout(120)
def test_asgi_floor_runs() -> None:
    """The ASGI-floor benchmark answers through all three servers (each answer checked byte for byte
    by the benchmark) and prints a row with a CPU figure for each."""
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.asgi_floor", "--calls", "50", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {line.split()[0]: line.split() for line in run.stdout.splitlines()[2:]}
    assert set(rows) == {"bare", "uvicorn", "bridge-wire"}
    assert all(float(row[-1]) > 0 for row in rows.values())


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
