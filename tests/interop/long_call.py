#!/usr/bin/env python3
"""One long tool call through the bridge, by hand, with the Python and the TypeScript MCP SDK clients.

    .venv/bin/python tests/interop/long_call.py [--seconds 180] [--progress-interval-s 5]

Starts a bridge on the fault fixture (``slow_tool {seconds}``, ``tests/fixtures/fault_injection_server.py``),
seeds two sessions and calls ``slow_tool`` in each at once: the Python SDK's client with an HTTP read
timeout of 60 s, the TypeScript SDK's (``tests/interop/mcp-sdk/client.mjs``) with ``timeout: 60000``
and ``resetTimeoutOnProgress``. Each would give up after 60 s without a byte or a progress
notification; both print how long the call took, how many notifications came (the first two and
the last) and the result. docs/clients.md ("Long tool calls") records a run. Not a test: a call of
minutes has no place in CI (tests/test_progress.py and tests/test_clients_ts.py make the same point
with a call of seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from tests.fixtures.bridges import BridgeProcess  # noqa: E402
from tests.fixtures.helpers import FAULT_SPEC, fault_env, slow_row  # noqa: E402
from tests.interop.node import ensure_packages  # noqa: E402

LIMIT_S = 60.0  # each client's own limit: silence (Python) or time without progress (TypeScript)


async def python_client(mcp: dict[str, Any], seconds: float) -> dict[str, Any]:
    seen: list[tuple[float, float, str | None]] = []
    began = time.monotonic()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((round(time.monotonic() - began, 1), progress, message))

    http = httpx2.AsyncClient(headers=mcp["headers"], timeout=httpx2.Timeout(30, read=LIMIT_S))
    async with http, Client(streamable_http_client(mcp["url"], http_client=http)) as client:  # type: ignore[arg-type]
        began = time.monotonic()
        result = await client.call_tool("slow_tool", {"seconds": seconds}, progress_callback=on_progress)
    return {
        "client": f"Python MCP SDK {version('mcp')}, httpx read timeout {LIMIT_S:g} s",
        "seconds": round(time.monotonic() - began, 1),
        "notifications": len(seen),
        "first": seen[:2],
        "last": seen[-1:],
        "result": result.structured_content,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="how long the tool call runs")
    parser.add_argument(
        "--progress-interval-s", type=float, default=None, help="the bridge's (default: its own)"
    )
    args = parser.parse_args()
    sdk = ensure_packages("mcp-sdk")
    bridge_args = ["--resources-server", FAULT_SPEC]
    if args.progress_interval_s is not None:
        bridge_args += ["--progress-interval-s", str(args.progress_interval_s)]
    bridge = BridgeProcess(args=bridge_args, env=fault_env()).start(Path(tempfile.mkdtemp()), timeout=240)
    try:
        py_session, ts_session = (bridge.seed(slow_row("slow_tool"))["mcp"] for _ in range(2))
        options = {"timeout": int(LIMIT_S * 1000), "resetTimeoutOnProgress": True}
        call = {"name": "slow_tool", "arguments": {"seconds": args.seconds}, "options": options}
        plan = {"url": ts_session["url"], "headers": ts_session["headers"], "calls": [call]}
        ts = subprocess.Popen(
            ["node", "client.mjs", json.dumps(plan)], cwd=sdk.path, stdout=subprocess.PIPE, text=True
        )
        print(json.dumps(asyncio.run(python_client(py_session, args.seconds))))
        out = json.loads(ts.communicate(timeout=args.seconds + 120)[0])
        [answer] = out["calls"]
        shown = {
            "client": f"TypeScript MCP SDK {out['sdk_version']}, timeout {options['timeout']} ms, "
            "resetTimeoutOnProgress",
            "seconds": round(answer["ms"] / 1000, 1),
            "notifications": len(answer["progress"]),
            "first": answer["progress"][:2],
            "last": answer["progress"][-1:],
            "result": answer.get("structuredContent"),
            "error": answer.get("error"),
        }
        print(json.dumps(shown))
    finally:
        bridge.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
