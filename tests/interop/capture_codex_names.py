#!/usr/bin/env python3
"""Capture the tool names the real Codex CLI shows the model for the bridge's MCP tools.

    .venv/bin/python tests/interop/capture_codex_names.py [--out tests/fixtures/client_names/codex-cli.json]

For each (Gym env, server name) below: start ``gym-mcp-bridge serve`` for the env, seed one row,
write a Codex ``config.toml`` whose ``[mcp_servers.<server name>]`` points at the bridge (through
a recording proxy, to capture the ``tools/list`` Codex received), and run the pinned
``codex exec --json`` against a stub Responses-API model. The stub records the ``tools`` array of
Codex's first ``POST /v1/responses``; then it calls every MCP function Codex offered, one per turn,
by the exact name (and namespace) Codex offered. Codex's own ``mcp_tool_call`` events say which
MCP tool each call reached, so the pairing emitted name -> MCP tool comes from Codex, not from us.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fixtures.bridges import BridgeProcess, gym_data  # noqa: E402
from tests.interop.client_names import CAPTURED, FIXTURES, bridge_env, invocation, write_fixture  # noqa: E402
from tests.interop.node import ensure_packages  # noqa: E402
from tests.test_clients_codex import (  # noqa: E402
    CODEX_VERSION,
    STUB_KEY_ENV,
    RecordingProxy,
    StubResponsesProvider,
    mcp_calls,
    run_codex,
)

OUT = FIXTURES / "codex-cli.json"
LONG_SERVER = "gym_bridge_rollout_session_0001_example_state_mgmt"  # 50 characters
MID_SERVER = "gym_bridge_rollout_example_state"  # 32 characters: tool part partly kept
# Two server names that sanitize to the same namespace (mcp__gym_bridge): Codex 0.171.0 adds a hash.
COLLIDING = ("gym-bridge", "gym.bridge")


def long_server(length: int, joint: str = "_") -> str:
    """A readable server name of exactly ``length`` characters ending in its length (``joint``
    separates the words, so two joints give two names that sanitize alike)."""
    stem = joint.join(["gym", "bridge", "rollout", "session"] * 12)
    return stem[: length - 4] + joint + f"{length:03d}"


# Codex 0.171.0 hashes a namespaced MCP tool once len("mcp__" + server) + 2 + len(tool) passes 128:
# for the counter's 17-character tools that is a server of 105+ characters; from 109
# on not even the 13-character hash suffix fits after the namespace. Server names of 90-127
# characters probe both sides of both limits; the workplace tools (up to 44 characters) cross
# the first one at shorter servers; two long servers that sanitize alike add the namespace hash.
THRESHOLD_SERVERS = [long_server(n) for n in (90, 104, 105, 106, 108, 109, 115, 127)]
LONG_COLLIDING = (long_server(110, "-"), long_server(110, "."))
# (env, bridge args, runs: the server names configured together in one config.toml; None = the
# seed's own server_name)
RUNS: list[tuple[str, list[str], list[tuple[str | None, ...]]]] = [
    (
        "example_session_state_mgmt",
        [],
        [
            (None,),
            ("example-session.state",),
            (MID_SERVER,),
            (LONG_SERVER,),
            ("s" * 70,),
            COLLIDING,
            *((server,) for server in THRESHOLD_SERVERS),
            LONG_COLLIDING,
        ],
    ),
    (
        "workplace_assistant",
        ["--resources-server", "workplace_assistant"],
        [(None,), (LONG_SERVER,), COLLIDING, (long_server(84),), (long_server(90),), (long_server(127),)],
    ),
]


class ProbingStub(StubResponsesProvider):
    """Records the tools Codex offers, then calls each offered MCP function once (one per turn).

    Codex 0.171.0 sends its first model request while its MCP servers may still be starting
    (measured: a request offering one of two configured servers, and, on a loaded machine, none),
    so until a request offers ``expected`` MCP functions the stub answers with a call to a
    function Codex never offered (Codex answers it with an error and asks again) and waits."""

    WAIT_CALL = "wait_for_mcp_servers"

    def __init__(self, expected: int) -> None:
        super().__init__([])
        self.expected = expected
        self.probes: list[tuple[str | None, str]] = []
        self.offered_tools: list[dict[str, Any]] = []  # the tools array of the request probed
        self.waits = 0

    @staticmethod
    def mcp_functions(body: dict[str, Any]) -> list[tuple[str | None, str]]:
        found: list[tuple[str | None, str]] = []
        for tool in body.get("tools") or []:
            if tool.get("type") == "namespace" and str(tool.get("name", "")).startswith("mcp__"):
                found += [(tool["name"], c["name"]) for c in tool.get("tools") or []]
            elif tool.get("type") == "function" and str(tool.get("name", "")).startswith("mcp__"):
                found.append((None, tool["name"]))
        return found

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self.requests.append(body)
        if not self.probes:
            offered = self.mcp_functions(body)
            if len(offered) >= self.expected:
                self.probes, self.offered_tools = offered, body.get("tools") or []
        step = sum(1 for i in body.get("input") or [] if i.get("type") == "function_call_output") - self.waits
        rid = f"resp_stub_{len(self.requests)}"
        item: dict[str, Any]
        if not self.probes and self.waits < 40:
            self.waits += 1
            time.sleep(0.5)
            item = {
                "type": "function_call",
                "id": f"fc_wait_{self.waits}",
                "call_id": f"call_wait_{self.waits}",
                "name": self.WAIT_CALL,
                "arguments": "{}",
            }
        elif step < len(self.probes):
            namespace, name = self.probes[step]
            item = {
                "type": "function_call",
                "id": f"fc_stub_{step}",
                "call_id": f"call_stub_{step}",
                "name": name,
                "arguments": "{}",
            }
            if namespace is not None:
                item["namespace"] = namespace
            self.emitted.append(item)
        else:
            item = self._message("Done.")
        usage = {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2,
        }
        return [
            {"type": "response.created", "response": {"id": rid}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {"id": rid, "usage": usage}},
        ]


def session_tools(bridge_url: str, metadata: dict[str, Any]) -> list[str]:
    """The seeded session's tools, listed by the bridge itself (one stateless ``tools/list``)."""
    answer = httpx.post(
        bridge_url + str(metadata["url_path"]),
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**metadata["headers"], "Accept": "application/json, text/event-stream"},
        timeout=30,
    )
    answer.raise_for_status()
    return [tool["name"] for tool in answer.json()["result"]["tools"]]


def capture_one(
    codex: str, bridge: BridgeProcess, row: dict[str, Any], servers: tuple[str | None, ...]
) -> dict[str, Any]:
    """One ``codex exec`` with ``servers`` all configured on one seeded session of ``bridge``."""
    metadata = run_codex.mcp_metadata(run_codex.seed(bridge.url, row))
    names = [server or str(metadata["server_name"]) for server in servers]
    expected = len(session_tools(bridge.url, metadata)) * len(names)
    with RecordingProxy(bridge.url) as proxy, ProbingStub(expected) as stub:
        url = f"{proxy.url}{metadata['url_path']}"
        config = run_codex.codex_config(
            metadata,
            server_name=names[0],
            url=url,
            model="gym-stub-model",
            model_base_url=stub.base_url,
            api_key_env=STUB_KEY_ENV,
        )
        for name in names[1:]:
            config["mcp_servers"][name] = run_codex.mcp_server_entry(metadata, url)
        events, stderr, code = run_codex.run_codex_exec(
            codex, config, "Call each tool once.", env={STUB_KEY_ENV: "stub-key"}, timeout_s=600
        )
    if code != 0:
        raise SystemExit(f"codex exec exited {code}:\n{stderr[-3000:]}")
    listed = [t["name"] for t in proxy.rpc("tools/list")[0]["answer"]["result"]["tools"]]
    if not stub.probes:
        raise SystemExit(f"{names}: no request of Codex offered all {expected} MCP tools (listed {listed})")
    calls = mcp_calls(events)
    if len(calls) != len(stub.probes) or len(stub.probes) != len(listed) * len(names):
        raise SystemExit(f"{names}: offered {stub.probes}, listed {listed}, Codex called {calls}")
    cases = []
    for (namespace, emitted), call in zip(stub.probes, calls, strict=True):
        if call["server"] not in names:
            raise SystemExit(f"call to {emitted!r} went to server {call['server']!r}, not one of {names}")
        note = f"codex exec printed mcp_tool_call server={call['server']!r} tool={call['tool']!r}"
        if len(names) > 1:
            note += f"; servers configured together in this run: {names}"
        cases.append(
            {
                "server": call["server"],
                "tool": call["tool"],
                "emitted": emitted,
                "namespace": namespace,
                "tools": listed,
                "note": note,
            }
        )
    return {"servers": names, "first_request_tools": stub.offered_tools, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--raw", type=Path, help="also write Codex's full first-request tools arrays here")
    parser.add_argument(
        "--bridge-src",
        type=Path,
        help="run the bridge package from this directory (e.g. a git archive of HEAD)",
    )
    args = parser.parse_args(argv)
    codex = str(ensure_packages("codex").bin("codex"))
    version = subprocess.run([codex, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if version != f"codex-cli {CODEX_VERSION}":
        raise SystemExit(f"expected codex-cli {CODEX_VERSION}, got {version!r}")
    log_dir = ROOT / ".cache" / "capture-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cases: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []
    for env, bridge_args, servers in RUNS:
        bridge = BridgeProcess(args=bridge_args, env=bridge_env(args.bridge_src)).start(log_dir, timeout=240)
        try:
            row = gym_data(env)[0]
            for server in servers:
                result = capture_one(codex, bridge, row, server)
                cases += result["cases"]
                raw.append({"env": env, "servers": result["servers"], "tools": result["first_request_tools"]})
                print(f"{env} / {result['servers']}: {len(result['cases'])} tools", file=sys.stderr)
        finally:
            bridge.stop()
    header = {
        "client": "codex-cli",
        "version": CODEX_VERSION,
        "command": (
            f"{invocation(argv)}  # for each run in RUNS (server names configured together): "
            "CODEX_HOME=<tmp with config.toml [mcp_servers.<server>] url+http_headers, model_provider "
            "wire_api=responses at a local stub> .cache/interop/codex/node_modules/.bin/codex exec --json "
            "--ephemeral --skip-git-repo-check --cd <tmp> --strict-config -- 'Call each tool once.'; "
            "'emitted'/'namespace' are read from the tools array of the first POST /v1/responses of Codex "
            "that offered every configured server's tools (the stub answers earlier ones with a call to an "
            "unoffered function); "
            "'tool' is the tool of the mcp_tool_call event Codex printed after the stub called that name"
        ),
        "captured": CAPTURED,
        "source": f"npm @openai/codex@{CODEX_VERSION} (tests/interop/codex/package-lock.json)",
    }
    write_fixture(args.out, header, cases)
    if args.raw:
        args.raw.write_text(json.dumps(raw, indent=2) + "\n")
    print(f"wrote {len(cases)} cases to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
