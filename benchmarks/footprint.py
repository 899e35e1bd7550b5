"""Start-up and footprint: restart to ready against a warm upstream, and the memory idle sessions hold.

    make bench ARGS="footprint [--restarts 7] [--sessions 10000] [--json FILE]"

* Restart: with the bare upstream up, ``gym-mcp-bridge serve`` is spawned ``--restarts`` times and
  timed to the first 200 from ``/readyz`` (polled every 5 ms) and to a first answered MCP
  ``tools/call``. Each round also times the floors: the interpreter alone, a process that only
  imports the MCP SDK's server (``SDK_SERVER``), and nginx restarted in front of the same upstream.
  Beside it, ``python -X importtime`` over what ``serve`` imports, the MCP SDK apart.
* Idle sessions: a fresh bridge's RSS before and after ``--sessions`` sessions (default
  ``max_sessions``, 10,000) that then sit idle; a sample is read back and must be exact.
"""

from __future__ import annotations

import argparse
import http.cookiejar as http_cookiejar
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import client, floors, procs, report
from benchmarks.client import MCP_ACCEPT, TOKEN_HEADER
from benchmarks.procs import BenchError, Proc

WARM_SESSIONS = 50  # seeded (and ten of them called) before the idle sessions are measured
SDK_PACKAGES = ("mcp", "mcp_types")
ROUND_KEYS = ("ready_s", "first_answer_s", "interpreter_s", "sdk_server_import_s", "nginx_ready_s")
# What /mcp is served with, imported at its fastest (the cycle collector paused, as ``serve`` does),
# timed to the import's end: os._exit skips the interpreter's teardown.
SDK_SERVER = "import gc; gc.disable(); import mcp.server.lowlevel, mcp.server.streamable_http_manager"


def imports() -> dict[str, float]:
    """Milliseconds of ``import`` for what ``serve`` loads, by ``-X importtime``: all, the MCP SDK's."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import bridge.commands.cli, bridge.http.app"],
        capture_output=True,
        text=True,
        check=True,
        cwd=procs.ROOT,
    )
    total = sdk = 0.0
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        if not self_us.isdigit():
            continue  # the header line
        total += int(self_us) / 1e3
        if name.split(".", 1)[0] in SDK_PACKAGES:
            sdk += int(self_us) / 1e3
    return {"all_ms": total, "mcp_sdk_ms": sdk, "rest_ms": total - sdk}


def no_cookies() -> httpx.Client:
    """A client that keeps no cookie: a seed carrying the last session's cookie would reach the same
    upstream session (the bridge hands the caller's cookies to the upstream, as Gym's contract has it)."""
    http = httpx.Client(timeout=30)
    http.cookies.jar.set_policy(http_cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return http


def seed(http: httpx.Client, url: str, initial: int) -> str:
    body = {"responses_create_params": {"input": []}, "initial_count": initial}
    return str(http.post(f"{url}/seed_session", json=body).json()["mcp"]["headers"][TOKEN_HEADER])


def call(http: httpx.Client, url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    """One MCP ``tools/call``'s structured answer; BenchError on any error."""
    answer = http.post(
        f"{url}/mcp",
        content=client.tools_call(tool, arguments),
        headers={TOKEN_HEADER: token, "accept": MCP_ACCEPT, "content-type": "application/json"},
    )
    return client.decode_rpc(url, answer.status_code, answer.content)


def first_answer(bridge: Proc, http: httpx.Client) -> None:
    """Seed a session and call one tool over MCP; BenchError unless the counter answers exact.
    ``http`` is made before the bridge is spawned: creating a client (its TLS context) would
    otherwise be timed as the bridge's."""
    answer = call(http, bridge.url, seed(http, bridge.url, 7), "get_counter_value", {})
    if answer != {"count": 7}:
        raise BenchError(f"first answer after a restart: {answer!r}")


def exits(code: str) -> float:
    """Seconds from spawning ``python -c code`` (the bridge's interpreter and directory) to the end
    of ``code`` (``os._exit``, no teardown)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", f"{code}; import os; os._exit(0)"], cwd=procs.ROOT, check=True)
    return time.monotonic() - started


def restarts(workdir: Path, upstream: Proc, count: int) -> list[dict[str, float]]:
    with no_cookies() as http:
        return [restart_round(workdir, upstream, http, i) for i in range(count)]


def restart_round(workdir: Path, upstream: Proc, http: httpx.Client, i: int) -> dict[str, float]:
    """The bridge's restart to ready and to its first answer, and the floors. The SDK's import is
    timed just before and just after the bridge and averaged, so a machine whose speed drifts within
    a round moves both sides alike."""
    sdk_before = exits(SDK_SERVER)
    started = time.monotonic()
    bridge = procs.start_bridge(workdir, upstream.url, name=f"restart-{i}")
    try:
        ready = float(bridge.extra["ready_s"])  # type: ignore[arg-type]
        first_answer(bridge, http)
        answered = time.monotonic() - started
    finally:
        bridge.stop()
    sdk_after = exits(SDK_SERVER)
    started = time.monotonic()
    proxy = floors.start_nginx(workdir, upstream.url, core=None, name=f"nginx-{i}", poll=0.005)
    nginx_s = time.monotonic() - started
    proxy.stop()
    return {
        "ready_s": ready,
        "first_answer_s": answered,
        "interpreter_s": exits("pass"),
        "sdk_server_import_s": (sdk_before + sdk_after) / 2,
        "nginx_ready_s": nginx_s,
    }


def idle(workdir: Path, upstream: Proc, sessions: int) -> dict[str, Any]:
    """A fresh bridge: RSS after ``WARM_SESSIONS`` sessions (ten of them called) and after ``sessions``
    in all, which then sit idle; a sample is read back over MCP and must be exact."""
    bridge = procs.start_bridge(workdir, upstream.url, name="bridge-idle")
    try:
        with no_cookies() as http:
            for token in [seed(http, bridge.url, 1) for _ in range(WARM_SESSIONS)][:10]:
                call(http, bridge.url, token, "increment_counter", {"count": 1})
            time.sleep(0.5)
            before, up_before = bridge.memory()["rss_kb"], upstream.memory()["rss_kb"]
            count = sessions - WARM_SESSIONS
            opened = [seed(http, bridge.url, 5) for _ in range(count)]
            time.sleep(0.5)
            after = bridge.memory()
            finals = [
                call(http, bridge.url, t, "get_counter_value", {}) for t in opened[:: max(1, count // 20)]
            ]
        return {
            "sessions": count,
            "bridge_rss_before_mb": before / 1024,
            "bridge_rss_after_mb": after["rss_kb"] / 1024,
            "bridge_rss_growth_bytes_per_session": (after["rss_kb"] - before) * 1024 / count,
            "bridge_peak_rss_mb": after["hwm_kb"] / 1024,
            "upstream_rss_growth_bytes_per_session": (upstream.memory()["rss_kb"] - up_before) * 1024 / count,
            "correct": all(f == {"count": 5} for f in finals),
        }
    finally:
        bridge.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="make bench ARGS='footprint'", description=(__doc__ or "").split("\n\n")[0]
    )
    p.add_argument("--restarts", type=int, default=7)
    p.add_argument("--sessions", type=int, default=10000, help="open sessions in all (<= max_sessions)")
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "footprint.json")
    args = p.parse_args(argv)
    out = report.header("footprint", argv)
    with tempfile.TemporaryDirectory(prefix="gym-mcp-footprint-") as tmp:
        workdir = Path(tmp)
        upstream = procs.start_bare_upstream(workdir)
        try:
            out["restarts"] = starts = restarts(workdir, upstream, args.restarts)
            out["idle"] = idle(workdir, upstream, args.sessions)
        finally:
            upstream.stop()
    out["loadavg_at_end"], out["nginx"] = os.getloadavg(), floors.nginx_version()
    out.update({f"{key}_median": statistics.median(s[key] for s in starts) for key in ROUND_KEYS})
    out["imports"] = imports()
    print(report.render_footprint(out))
    report.save(out, args.json)
    return 0 if out["idle"]["correct"] else 1
