"""The bridge's footprint outside its calls: restart to ready against a warm upstream, and the memory
an idle session holds.

    python -m benchmarks.footprint [--restarts 7] [--sessions 10000] [--json FILE]
    make bench ARGS="footprint"

* Restart: the bare upstream (``benchmarks/bare_upstream.py``) is up; ``gym-mcp-bridge serve``
  (external mode) is spawned ``--restarts`` times and timed from spawn to the first 200 from
  ``/readyz`` (polled every 5 ms) and to its first answer: a session seeded and one MCP
  ``tools/call`` answered. Each round also times its floors: the interpreter alone, a Python
  process that only imports the MCP SDK's server (``SDK_SERVER``: what any MCP server on the
  official Python SDK loads before it can answer), each from spawn to the end of its code, and nginx
  restarted in front of the same upstream (spawn to its first proxied 200, same poll). The report
  gives the bridge's ready over the SDK's floor, per round. Beside it, what the imports cost:
  ``python -X importtime`` over the modules ``serve`` loads, split into the MCP SDK (``mcp``,
  ``mcp_types``) and everything else.
* Idle sessions: a fresh bridge, its RSS before and after ``--sessions`` open sessions (the default
  is ``max_sessions``, 10,000) that then sit idle; a sample of them is read back and must be exact
  (``benchmarks.lifecycle.idle_sessions``).

Nothing here asserts a time; the figures go to the JSON and docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from benchmarks import lifecycle, nginx, procs
from benchmarks.clients import TOKEN_HEADER
from benchmarks.procs import BenchError, Proc

WARM_SESSIONS = 50  # lifecycle.idle_sessions seeds these (and calls ten) before it measures
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


def first_answer(bridge: Proc, http: httpx.Client) -> None:
    """Seed a session and call one tool over MCP; BenchError unless the counter answers exact.
    ``http`` is made before the bridge is spawned: creating a client (its TLS context) would
    otherwise be timed as the bridge's."""
    seeded = http.post(
        f"{bridge.url}/seed_session", json={"responses_create_params": {"input": []}, "initial_count": 7}
    )
    token = seeded.json()["mcp"]["headers"][TOKEN_HEADER]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_counter_value"}}
    headers = {TOKEN_HEADER: token, "accept": "application/json, text/event-stream"}
    answer = http.post(f"{bridge.url}/mcp", json=call, headers=headers).json()
    if answer.get("result", {}).get("structuredContent") != {"count": 7}:
        raise BenchError(f"first answer after a restart: {answer!r}")


def exits(code: str) -> float:
    """Seconds from spawning ``python -c code`` (the bridge's interpreter and directory) to the end
    of ``code`` (``os._exit``, no teardown)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", f"{code}; import os; os._exit(0)"], cwd=procs.ROOT, check=True)
    return time.monotonic() - started


def restarts(workdir: Path, upstream: Proc, count: int) -> list[dict[str, float]]:
    with httpx.Client(timeout=30) as http:
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
    proxy = nginx.start(workdir, upstream.url, core=None, name=f"nginx-{i}", poll=0.005)
    nginx_s = time.monotonic() - started
    proxy.stop()
    return {
        "ready_s": ready,
        "first_answer_s": answered,
        "interpreter_s": exits("pass"),
        "sdk_server_import_s": (sdk_before + sdk_after) / 2,
        "nginx_ready_s": nginx_s,
    }


async def idle(workdir: Path, upstream: Proc, sessions: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        return await lifecycle.idle_sessions(workdir, upstream, http, sessions - WARM_SESSIONS, [])


def run(args: argparse.Namespace) -> dict[str, Any]:
    when, load0 = dt.datetime.now(dt.UTC), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gym-mcp-footprint-") as tmp:
        workdir = Path(tmp)
        upstream = procs.start_bare_upstream(workdir)
        try:
            starts = restarts(workdir, upstream, args.restarts)
            memory = asyncio.run(idle(workdir, upstream, args.sessions))
        finally:
            upstream.stop()
    return {
        "when_utc": when.isoformat(),
        "command": "python -m benchmarks.footprint " + " ".join(args.argv),
        "python": sys.version.split()[0],
        "loadavg_at_start": load0,
        "loadavg_at_end": os.getloadavg(),
        "restarts": starts,
        "nginx": nginx.version(),
        **{f"{key}_median": statistics.median(s[key] for s in starts) for key in ROUND_KEYS},
        "imports": imports(),
        "idle": memory,
    }


def render(report: dict[str, Any]) -> str:
    starts, imp, mem = report["restarts"], report["imports"], report["idle"]
    ready = " ".join(f"{s['ready_s']:.2f}" for s in starts)
    over = [s["ready_s"] - s["sdk_server_import_s"] for s in starts]
    ratio = [s["ready_s"] / s["sdk_server_import_s"] for s in starts]
    return "\n".join(
        [
            f"gym-mcp-bridge footprint, {report['when_utc'][:16]} UTC, Python {report['python']}, "
            f"load avg at start {report['loadavg_at_start'][0]:.2f}",
            f"restart to ready (warm upstream): median {report['ready_s_median']:.3f} s ({ready}); "
            f"to the first answered tools/call: median {report['first_answer_s_median']:.3f} s",
            f"floors, same rounds (median): the interpreter {report['interpreter_s_median']:.3f} s; "
            f"Python importing the MCP SDK's server, no bridge code, {report['sdk_server_import_s_median']:.3f} s; "
            f"nginx restarted to its first proxied answer {report['nginx_ready_s_median']:.3f} s; "
            f"the bridge's ready over the SDK floor, per round: median {statistics.median(over):+.3f} s, "
            f"ready / floor {statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})",
            f"imports of serve: {imp['all_ms']:.0f} ms, of which the MCP SDK {imp['mcp_sdk_ms']:.0f} ms "
            f"and everything else {imp['rest_ms']:.0f} ms (python -X importtime, one run)",
            f"idle sessions: {mem['sessions'] + WARM_SESSIONS} open, bridge RSS {mem['bridge_rss_before_mb']:.1f} -> "
            f"{mem['bridge_rss_after_mb']:.1f} MB, {mem['bridge_rss_growth_bytes_per_session']:.0f} bytes per session; "
            f"sampled sessions exact: {mem['correct']}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.footprint", description=__doc__.split("\n\n")[0])
    p.add_argument("--restarts", type=int, default=7)
    p.add_argument("--sessions", type=int, default=10000, help="open sessions in all (<= max_sessions)")
    p.add_argument("--json", type=Path, default=procs.ROOT / "benchmarks" / "results" / "footprint.json")
    args = p.parse_args(argv)
    # the command line as given, for the report (``benchmarks.run footprint`` passes it without that word)
    args.argv = sys.argv[1:] if argv is None else argv
    report = run(args)
    print(render(report))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"json: {args.json}")
    return 0 if report["idle"]["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
