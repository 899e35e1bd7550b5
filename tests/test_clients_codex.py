"""The real Codex CLI (``@openai/codex``, pinned in ``tests/interop/codex``) against the bridge.

Codex needs a model. There is no hosted model here, so the model provider is
``StubResponsesProvider``: a small local OpenAI Responses-API stub (SSE streaming, the events
Codex parses: ``response.created``, ``response.output_item.done``, ``response.completed``). It
is not a policy: it answers with the function calls that solve one given row, read from that
row's own ground truth (counter: ``increment_counter(expected - initial)`` then
``get_counter_value``; workplace_assistant: the row's ``ground_truth`` calls), addressed to the
tools Codex offered it. Everything else is real: Codex reads the ``config.toml`` written from the
seed metadata, connects to the bridge's ``/mcp`` with the session header, calls the tools, prints
``exec --json`` events; the bridge's ``/verify`` runs Gym's own verifier.

So a rollout whose calls landed in another session, or a stub solving another row, scores 0 —
the negative tests below prove the score is not a constant.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import HEADER, ROOT, BridgeProcess, gym_data, upstream_url
from tests.fixtures.harness import (
    LocalStub,
    check_names,
    counter_solution,
    ground_truth_solution,
    native_reward,
)
from tests.interop.client_names import FIXTURES
from tests.interop.node import installed_cli

pytestmark = pytest.mark.npm

CODEX_VERSION = "0.171.0"
EXAMPLE = ROOT / "examples" / "clients" / "codex" / "run_codex.py"
STUB_KEY_ENV = "GYM_MCP_BRIDGE_STUB_KEY"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_codex_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


run_codex = load_example()


# -- the stub model provider ----------------------------------------------------------------------


class StubResponsesProvider(LocalStub):
    """A stub OpenAI Responses-API endpoint (``POST /v1/responses``, SSE) that replays a solution.

    Each request is answered with the next call of ``solution`` (one per turn, counted by the
    ``function_call_output`` items Codex sends back), addressed the way Codex offered the tool:
    inside a ``namespace`` tool (``namespace`` + ``name``) or as a flat function. After the last
    call it answers with a short assistant message. It records what Codex sent.
    """

    def __init__(self, solution: list[tuple[str, dict[str, Any]]], final_text: str = "Done.") -> None:
        self.solution = solution
        self.final_text = final_text
        self.requests: list[dict[str, Any]] = []
        self.emitted: list[dict[str, Any]] = []
        super().__init__()

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @staticmethod
    def offered(body: dict[str, Any]) -> dict[str, tuple[str | None, str]]:
        """{bare tool name: (namespace or None, name)} for every function Codex offered."""
        found: dict[str, tuple[str | None, str]] = {}
        for tool in body.get("tools") or []:
            if tool.get("type") == "namespace":
                for child in tool.get("tools") or []:
                    found.setdefault(child["name"], (tool["name"], child["name"]))
            elif tool.get("type") == "function":
                found.setdefault(tool["name"], (None, tool["name"]))
        return found

    def target(self, body: dict[str, Any], step: int, tool: str) -> tuple[str | None, str] | None:
        """(namespace or None, name) to call ``tool`` by at ``step``: the first offer of it."""
        return self.offered(body).get(tool)

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self.requests.append(body)
        step = sum(1 for item in body.get("input") or [] if item.get("type") == "function_call_output")
        rid = f"resp_stub_{len(self.requests)}"
        events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": rid}}]
        if step < len(self.solution):
            tool, arguments = self.solution[step]
            target = self.target(body, step, tool)
            if target is None:
                text = f"stub: tool {tool!r} was not offered (offered: {sorted(self.offered(body))})"
                item: dict[str, Any] = self._message(text)
            else:
                namespace, name = target
                item = {
                    "type": "function_call",
                    "id": f"fc_stub_{step}",
                    "call_id": f"call_stub_{step}",
                    "name": name,
                    "arguments": json.dumps(arguments),
                }
                if namespace is not None:
                    item["namespace"] = namespace
                self.emitted.append(item)
        else:
            item = self._message(self.final_text)
        events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        }
        events.append({"type": "response.completed", "response": {"id": rid, "usage": usage}})
        return events

    @staticmethod
    def _message(text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": "msg_stub",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def function_outputs(self) -> list[Any]:
        """The tool results Codex reported back to the model in its last request, as JSON.

        Codex wraps an MCP result for the model as ``Wall time: <s> seconds\\nOutput:\\n<text>``.
        """
        last = self.requests[-1] if self.requests else {}
        texts = [i["output"] for i in last.get("input") or [] if i.get("type") == "function_call_output"]
        return [json.loads(t.split("Output:\n", 1)[-1]) for t in texts]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # e.g. a model-list probe: this stub has none
                self.send_error(404)

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/responses"):
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                payload = "".join(
                    f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in stub.answer(body)
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


class RecordingProxy(LocalStub):
    """A plain HTTP forwarder in front of the bridge's ``/mcp`` that records the JSON-RPC traffic.

    Only used to measure what Codex sends (protocol revision, method names, tool names, headers);
    requests and answers pass through unchanged.
    """

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.exchanges: list[dict[str, Any]] = []
        super().__init__()

    @property
    def url(self) -> str:
        return self.root_url

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                with httpx.Client(timeout=120) as client:
                    answer = client.request(
                        self.command, proxy.target + self.path, content=raw, headers=headers
                    )
                try:
                    request_json = json.loads(raw) if raw else None
                except ValueError:
                    request_json = None
                try:
                    answer_json = answer.json() if answer.content else None
                except ValueError:
                    answer_json = None
                proxy.exchanges.append(
                    {
                        "method": self.command,
                        "headers": {k.lower(): v for k, v in headers.items()},
                        "request": request_json,
                        "status": answer.status_code,
                        "answer": answer_json,
                    }
                )
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                    ):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_DELETE = _forward

        return Handler

    def rpc(self, method: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.exchanges
            if isinstance(e["request"], dict) and e["request"].get("method") == method
        ]


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def codex() -> Iterator[str]:
    yield installed_cli("codex", "codex", f"codex-cli {CODEX_VERSION}")


def counter_rows() -> list[dict[str, Any]]:
    return gym_data("example_session_state_mgmt")


def exec_codex(
    codex: str,
    stub: StubResponsesProvider,
    row: dict[str, Any],
    metadata: dict[str, Any],
    url: str | None = None,
) -> list[dict[str, Any]]:
    config = run_codex.codex_config(
        metadata, url=url, model="gym-stub-model", model_base_url=stub.base_url, api_key_env=STUB_KEY_ENV
    )
    events, stderr, code = run_codex.run_codex_exec(
        codex, config, run_codex.user_prompt(row), env={STUB_KEY_ENV: "stub-key"}, timeout_s=180
    )
    assert code == 0, f"codex exec exited {code}:\n{stderr[-3000:]}"
    return list(events)


def mcp_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e["item"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "mcp_tool_call"
    ]


# -- tests ----------------------------------------------------------------------------------------


def test_example_script_runs_codex_end_to_end_on_the_counter(
    codex: str, counter_bridge: BridgeProcess
) -> None:
    """``examples/clients/codex/run_codex.py`` as a user runs it: seed, config, codex exec, verify."""
    row = counter_rows()[0]  # "add 1 then add 2 then get the count": 3 -> 6
    with StubResponsesProvider(counter_solution(row)) as stub:
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                str(EXAMPLE),
                "--bridge-url",
                counter_bridge.url,
                "--row-json",
                json.dumps(row),
                "--codex",
                codex,
                "--model",
                "gym-stub-model",
                "--model-base-url",
                stub.base_url,
                "--api-key-env",
                STUB_KEY_ENV,
            ],
            env={**os.environ, STUB_KEY_ENV: "stub-key"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr + result.stdout[-3000:]
    report = json.loads(result.stdout)
    server = report["mcp"]["server_name"]
    assert server == "example_session_state_mgmt"
    entry = tomllib.loads(report["config_toml"])["mcp_servers"][server]
    assert entry["url"] == report["mcp"]["url"] == f"{counter_bridge.url}/mcp"
    assert entry["http_headers"] == report["mcp"]["headers"]

    # Codex offered the bridge's tools to the model inside one namespace, mcp__<server>
    namespaces = [t for t in stub.requests[0]["tools"] if t.get("type") == "namespace"]
    ours = [t for t in namespaces if t["name"] == f"mcp__{server}"]
    assert len(ours) == 1
    assert sorted(c["name"] for c in ours[0]["tools"]) == ["get_counter_value", "increment_counter"]
    assert [(i["namespace"], i["name"]) for i in stub.emitted] == [
        (f"mcp__{server}", "increment_counter"),
        (f"mcp__{server}", "get_counter_value"),
    ]
    # ... and really called them on the bridge: the results Codex handed back to the model
    assert stub.function_outputs() == [{"success": True}, {"count": 6}]
    calls = mcp_calls(report["events"])
    assert [(c["server"], c["tool"], c["arguments"], c["status"]) for c in calls] == [
        (server, "increment_counter", {"count": 3}, "completed"),
        (server, "get_counter_value", {}, "completed"),
    ]

    recorded = report["verify_recorded"]
    assert recorded["reward"] == 1.0
    assert recorded["_bridge"]["recorded_tool_calls"] == 2
    assert recorded["_bridge"]["normalized"] == {}  # Codex sends bare names in tools/call
    assert recorded["_bridge"]["agent_never_ran"] is False

    converted = report["verify_exec_json"]
    assert converted["reward"] == 1.0
    assert converted["_bridge"]["normalized"] == {
        f"mcp__{server}.increment_counter": "increment_counter",
        f"mcp__{server}.get_counter_value": "get_counter_value",
    }
    assert converted["_bridge"]["unresolved"] == []
    # the stored rollout keeps Codex's names
    echoed = [i for i in converted["response"]["output"] if i["type"] == "function_call"]
    assert [(i["namespace"], i["name"]) for i in echoed] == [
        (f"mcp__{server}", "increment_counter"),
        (f"mcp__{server}", "get_counter_value"),
    ]
    print(f"\ncodex example rollout (seed -> codex exec -> 2x verify): {elapsed:.1f}s")


def test_codex_in_a_wrong_session_scores_zero(codex: str, counter_bridge: BridgeProcess) -> None:
    """Mis-attribution is caught: the stub solving another row, or Codex holding another token."""
    row_a, row_b = counter_rows()[0], counter_rows()[1]  # 3 -> 6 and 6 -> 15

    # 1. the stub solves row B (increment by 9) in row A's session: 3 + 9 = 12, not 6
    seed_a = run_codex.seed(counter_bridge.url, row_a)
    meta_a = run_codex.mcp_metadata(seed_a)
    with StubResponsesProvider(counter_solution(row_b)) as stub:
        events = exec_codex(codex, stub, row_a, meta_a)
    assert stub.function_outputs() == [{"success": True}, {"count": 12}]
    token_a = meta_a["headers"][HEADER]
    response = run_codex.exec_events_to_response(events)
    assert run_codex.verify(counter_bridge.url, token_a, recorded=True)["reward"] == 0.0
    assert run_codex.verify(counter_bridge.url, token_a, response=response)["reward"] == 0.0

    # 2. the right solution for row A, but config.toml carries row B's session token: Codex's
    #    calls land in session B; session A, verified with its own token, was never touched
    seed_a = run_codex.seed(counter_bridge.url, row_a)
    seed_b = run_codex.seed(counter_bridge.url, row_b)
    meta_a, meta_b = run_codex.mcp_metadata(seed_a), run_codex.mcp_metadata(seed_b)
    with StubResponsesProvider(counter_solution(row_a)) as stub:
        events = exec_codex(codex, stub, row_a, meta_b)
    assert stub.function_outputs() == [{"success": True}, {"count": 9}]
    token_a = meta_a["headers"][HEADER]
    verified = run_codex.verify(counter_bridge.url, token_a, recorded=True)
    assert verified["reward"] == 0.0
    assert verified["_bridge"]["recorded_tool_calls"] == 0
    assert verified["_bridge"]["agent_never_ran"] is True and verified["mask_sample"] is True
    converted = run_codex.verify(
        counter_bridge.url, token_a, response=run_codex.exec_events_to_response(events)
    )
    assert converted["reward"] == 0.0
    # while session B holds exactly what Codex did there (6 + 3 = 9, row B expects 15); read before
    # its verify, which finishes the session (its tools no longer run)
    value = httpx.post(f"{counter_bridge.url}/get_counter_value", json={}, headers=meta_b["headers"]).json()
    assert value == {"count": 9}
    assert run_codex.verify(counter_bridge.url, meta_b["headers"][HEADER], recorded=True)["reward"] == 0.0


@pytest.mark.parametrize("style", ["namespace", "flat"])
def test_codex_on_workplace_assistant_scores_the_ground_truth(
    codex: str, workplace_bridge: BridgeProcess, style: str
) -> None:
    """The catch-all workplace env (tools from the row): Gym's verifier replays the function calls,
    so the names the bridge restores decide the reward. Also measures the MCP traffic Codex sends."""
    rows = gym_data("workplace_assistant")
    row, other = rows[0], rows[1]
    seed_answer = run_codex.seed(workplace_bridge.url, row)
    metadata = run_codex.mcp_metadata(seed_answer)
    server = metadata["server_name"]
    with (
        RecordingProxy(workplace_bridge.url) as proxy,
        StubResponsesProvider(ground_truth_solution(row)) as stub,
    ):
        events = exec_codex(codex, stub, row, metadata, url=f"{proxy.url}{metadata['url_path']}")
    expected = [c["name"] for c in row["ground_truth"]]
    assert [c["tool"] for c in mcp_calls(events)] == expected
    assert all(c["status"] == "completed" for c in mcp_calls(events))

    # measured: the revision Codex negotiated, and the names it sent in tools/call
    initialize = proxy.rpc("initialize")
    assert initialize, proxy.exchanges
    offered_revision = initialize[0]["request"]["params"]["protocolVersion"]
    negotiated = initialize[0]["answer"]["result"]["protocolVersion"]
    assert negotiated == offered_revision
    sent = [e["request"]["params"]["name"] for e in proxy.rpc("tools/call")]
    assert sent == expected
    assert all(
        e["headers"].get(HEADER.lower()) == metadata["headers"][HEADER] for e in proxy.rpc("tools/call")
    )
    listed = proxy.rpc("tools/list")[0]["answer"]["result"]["tools"]
    assert len(listed) == len(row["responses_create_params"]["tools"])
    print(
        f"\ncodex {CODEX_VERSION} MCP client: protocolVersion offered={offered_revision} "
        f"negotiated={negotiated}; clientInfo={initialize[0]['request']['params'].get('clientInfo')}; "
        f"tools/call names={sent}; model-side names={[(i.get('namespace'), i['name']) for i in stub.emitted]}"
    )

    token = metadata["headers"][HEADER]
    assert run_codex.verify(workplace_bridge.url, token, recorded=True)["reward"] == 1.0
    response = run_codex.exec_events_to_response(events, style=style)
    converted = run_codex.verify(workplace_bridge.url, token, response=response)
    assert converted["reward"] == 1.0
    key = f"mcp__{server}.{expected[0]}" if style == "namespace" else f"mcp__{server}__{expected[0]}"
    assert converted["_bridge"]["normalized"] == {key: expected[0]}

    # the same Codex run scored against another row's ground truth is 0: the reward is not constant
    wrong = {**other, "response": response}
    assert run_codex.post_json(f"{workplace_bridge.url}/verify", wrong, {HEADER: token})["reward"] == 0.0


# -- two servers whose names collide after sanitizing: Codex hashes the namespaces ----------------
#
# Codex 0.171.0 hashes an MCP namespace only when two configured servers sanitize to the same one
# (`gym-bridge` and `gym.bridge` -> `mcp__gym_bridge`): each gets `mcp__gym_bridge_<12 hex>`
# (tests/interop/capture_codex_names.py stored them in the codex-cli fixture). Session A is seeded
# on a bridge whose server name is `gym-bridge`, session B on a second bridge named `gym.bridge`
# (one bridge has one server name; with both sessions on one bridge, B's seeded name would also
# be `gym-bridge`, and A's hashed namespace would be evidence for B as well). Codex is configured
# with both, each under its seed's `server_name`, and the stub addresses each call to the hashed
# namespace Codex offered for the server that should receive it. The expected namespaces are the
# ones the real binary emitted when the fixture was captured (its `mcp_tool_call` events paired
# each namespace with its server), never recomputed here.

COLLIDING = ("gym-bridge", "gym.bridge")
FIND_RAJ = ("company_directory_find_email_address", {"name": "raj"})  # read-only: changes no state


def captured_namespaces() -> dict[str, str]:
    """{server: hashed namespace} the real Codex offered when both COLLIDING servers were configured."""
    stored = json.loads((FIXTURES / "codex-cli.json").read_text())
    assert stored["version"] == CODEX_VERSION
    pairs = {(c["server"], c["namespace"]) for c in stored["cases"] if c["server"] in COLLIDING}
    found = dict(pairs)
    assert len(pairs) == len(found) == len(COLLIDING), pairs  # one namespace per server, both stored
    return found


class CollidingStub(StubResponsesProvider):
    """Replays ``calls`` (namespace, tool, arguments): each tool in the namespace given, provided
    Codex offered that tool inside that namespace."""

    def __init__(self, calls: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.namespaces = [namespace for namespace, _, _ in calls]
        super().__init__([(tool, arguments) for _, tool, arguments in calls])

    def target(self, body: dict[str, Any], step: int, tool: str) -> tuple[str | None, str] | None:
        namespace = self.namespaces[step]
        inside = [
            child.get("name")
            for offered in body.get("tools") or []
            if offered.get("type") == "namespace" and offered.get("name") == namespace
            for child in offered.get("tools") or []
        ]
        return (namespace, tool) if tool in inside else None

    def mcp_namespaces(self) -> dict[str, list[str]]:
        """{namespace: bare tool names} for every ``mcp__`` namespace of Codex's first request."""
        return {
            t["name"]: [c["name"] for c in t.get("tools") or []]
            for t in self.requests[0].get("tools") or []
            if t.get("type") == "namespace" and str(t.get("name", "")).startswith("mcp__")
        }

    def transcript(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """The rollout as the model saw it: the ``function_call`` / ``function_call_output`` items
        Codex sent back in its last request (with the hashed namespaces it offered) and its final
        answer, as one Responses object."""
        response = run_codex.exec_events_to_response(events)
        items = [
            i
            for i in self.requests[-1].get("input") or []
            if i.get("type") in ("function_call", "function_call_output")
        ]
        response["output"] = items + [i for i in response["output"] if i.get("type") == "message"]
        return response


@dataclass
class CollisionRollout:
    """One ``codex exec`` with both colliding servers configured."""

    calls: list[tuple[str, str, dict[str, Any]]]  # (server, tool, arguments) the stub made
    namespaces: dict[str, str]  # server -> the namespace the stub addressed it by
    metadata: dict[str, dict[str, Any]]  # server -> its session's seed `mcp` block
    rows: dict[str, dict[str, Any]]  # server -> the row seeded in its session
    stub: CollidingStub
    events: list[dict[str, Any]]

    def token(self, server: str) -> str:
        return str(self.metadata[server]["headers"][HEADER])

    def made_in(self, server: str) -> list[tuple[str, dict[str, Any]]]:
        return [(tool, arguments) for s, tool, arguments in self.calls if s == server]


@pytest.fixture(scope="module")
def colliding_bridges(log_dir: Path) -> Iterator[dict[str, BridgeProcess]]:
    """workplace_assistant behind two bridges, named ``gym-bridge`` and ``gym.bridge``."""
    started: dict[str, BridgeProcess] = {}
    try:
        for name in COLLIDING:
            args = ["--resources-server", "workplace_assistant", "--server-name", name]
            started[name] = BridgeProcess(args=args).start(log_dir, timeout=240)
        yield started
    finally:
        for bridge in started.values():
            bridge.stop()


def collision_rollout(
    codex: str, bridges: dict[str, BridgeProcess], calls: list[tuple[str, str, dict[str, Any]]]
) -> CollisionRollout:
    rows = gym_data("workplace_assistant")
    seeded = dict(zip(COLLIDING, (rows[0], rows[1]), strict=True))  # A: row 0, B: row 1
    metadata = {s: run_codex.mcp_metadata(run_codex.seed(bridges[s].url, seeded[s])) for s in COLLIDING}
    assert [m["server_name"] for m in metadata.values()] == list(COLLIDING)
    namespaces = captured_namespaces()
    with CollidingStub([(namespaces[s], tool, arguments) for s, tool, arguments in calls]) as stub:
        first, second = COLLIDING
        config = run_codex.codex_config(
            metadata[first], model="gym-stub-model", model_base_url=stub.base_url, api_key_env=STUB_KEY_ENV
        )
        config["mcp_servers"][second] = run_codex.mcp_server_entry(metadata[second])
        events, stderr, code = run_codex.run_codex_exec(
            codex, config, run_codex.user_prompt(seeded[first]), env={STUB_KEY_ENV: "stub-key"}, timeout_s=180
        )
    assert code == 0, f"codex exec exited {code}:\n{stderr[-3000:]}"
    return CollisionRollout(calls, namespaces, metadata, seeded, stub, events)


@pytest.fixture(scope="module")
def collision_rollouts(
    codex: str, colliding_bridges: dict[str, BridgeProcess]
) -> dict[str, CollisionRollout]:
    """``solved``: A's ground truth in A's namespace, B's in B's. ``perturbed``: A's namespace gets
    a read-only call; A's ground truth goes to B's namespace (so it lands in session B)."""
    a, b = COLLIDING
    rows = gym_data("workplace_assistant")
    solved = [(a, t, args) for t, args in ground_truth_solution(rows[0])]
    solved += [(b, t, args) for t, args in ground_truth_solution(rows[1])]
    perturbed = [(a, *FIND_RAJ)] + [(b, t, args) for t, args in ground_truth_solution(rows[0])]
    return {
        "solved": collision_rollout(codex, colliding_bridges, solved),
        "perturbed": collision_rollout(codex, colliding_bridges, perturbed),
    }


def verify_transcript(
    bridge: BridgeProcess, token: str, response: dict[str, Any], aliases: list[str] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"response": response}
    if aliases is not None:
        body["_bridge"] = {"server_aliases": aliases}
    return dict(run_codex.post_json(f"{bridge.url}/verify", body, {HEADER: token}))


@pytest.mark.parametrize("case", ["solved", "perturbed"])
def test_codex_hashes_colliding_namespaces_as_captured(
    collision_rollouts: dict[str, CollisionRollout], case: str
) -> None:
    """The real binary offered the two hashed namespaces the fixture holds, every tool bare inside
    each, and delivered each call to the server the fixture pairs with the namespace called."""
    rollout = collision_rollouts[case]
    offered = rollout.stub.mcp_namespaces()
    assert sorted(offered) == sorted(rollout.namespaces.values())  # nothing else under mcp__
    tools = [t["name"] for t in rollout.rows[COLLIDING[0]]["responses_create_params"]["tools"]]
    for namespace in offered.values():
        assert sorted(namespace) == sorted(tools)
    emitted = [(i["namespace"], i["name"]) for i in rollout.stub.emitted]
    assert emitted == [(rollout.namespaces[s], tool) for s, tool, _ in rollout.calls]
    delivered = [(c["server"], c["tool"], c["arguments"], c["status"]) for c in mcp_calls(rollout.events)]
    assert delivered == [(s, tool, arguments, "completed") for s, tool, arguments in rollout.calls]
    cases = [
        {
            "server": server,
            "tool": tool,
            "emitted": tool,
            "namespace": rollout.namespaces[server],
            "tools": tools,
            "note": f"whole rollout, servers configured together: {list(COLLIDING)}",
        }
        for server, tool, _ in rollout.calls
    ]
    header = {"version": CODEX_VERSION, "command": "tests/test_clients_codex.py (colliding servers)"}
    check_names("codex-cli", header, cases)
    print(f"\ncodex {CODEX_VERSION} colliding servers {list(COLLIDING)} ({case}): offered {sorted(offered)}")


def test_codex_hashed_namespace_resolves_only_for_its_own_server(
    collision_rollouts: dict[str, CollisionRollout], colliding_bridges: dict[str, BridgeProcess]
) -> None:
    """Session A's hashed namespace resolves on the evidence of A's seeded server name; B's hashed
    namespace is unresolved for A (``unknown server alias``), nothing is proven from A's log, and
    the recorded trajectory (what A really served) scores what the same calls score natively."""
    a, b = COLLIDING
    bridge = colliding_bridges[a]
    upstream = upstream_url(bridge.url)
    row = gym_data("workplace_assistant")[0]
    for case, expected in (("solved", 1.0), ("perturbed", 0.0)):
        rollout = collision_rollouts[case]
        token = rollout.token(a)
        ns_a, ns_b = rollout.namespaces[a], rollout.namespaces[b]
        native = native_reward(upstream, row, rollout.made_in(a))
        recorded = run_codex.verify(bridge.url, token, recorded=True)
        assert recorded["reward"] == native == expected, (case, recorded["reward"], native)
        assert recorded["_bridge"]["recorded_tool_calls"] == len(rollout.made_in(a))

        in_a = [f"{ns_a}.{tool}" for tool, _ in rollout.made_in(a)]
        in_b = [f"{ns_b}.{tool}" for tool, _ in rollout.made_in(b)]
        model_side = verify_transcript(bridge, token, rollout.stub.transcript(rollout.events))
        assert model_side["_bridge"]["normalized"] == {name: name.split(".", 1)[1] for name in in_a}
        assert model_side["_bridge"]["unresolved"] == [
            {"name": name, "reason": "unknown server alias"} for name in in_b
        ]
        assert model_side["_bridge"]["proven_aliases"] == []

        response = run_codex.exec_events_to_response(rollout.events)
        converted = run_codex.verify(bridge.url, token, response=response)
        assert converted["_bridge"]["normalized"] == {
            f"mcp__{a}.{tool}": tool for tool, _ in rollout.made_in(a)
        }
        assert converted["_bridge"]["unresolved"] == [
            {"name": f"mcp__{b}.{tool}", "reason": "unknown server alias"} for tool, _ in rollout.made_in(b)
        ]

    # Control: declaring `gym.bridge` an alias of A (false here) makes B's hashed namespace
    # resolve for A, and A is then credited with the call B served: the name alone decides.
    rollout = collision_rollouts["perturbed"]
    declared = verify_transcript(bridge, rollout.token(a), rollout.stub.transcript(rollout.events), [b])
    assert declared["_bridge"]["unresolved"] == []
    assert (
        declared["_bridge"]["normalized"][f"{rollout.namespaces[b]}.email_reply_email"] == "email_reply_email"
    )
    assert declared["reward"] == 1.0


def test_codex_colliding_rollout_scores_like_native(
    collision_rollouts: dict[str, CollisionRollout], colliding_bridges: dict[str, BridgeProcess]
) -> None:
    """The transcript rewards (hashed names as the model used them, and ``exec --json`` converted)
    equal the native reward of the calls really made in each session: B's calls do not count in A."""
    a, b = COLLIDING
    rows = gym_data("workplace_assistant")
    for case, session, row, expected in (
        ("solved", a, rows[0], 1.0),
        ("perturbed", a, rows[0], 0.0),
        ("solved", b, rows[1], 1.0),
    ):
        rollout = collision_rollouts[case]
        bridge = colliding_bridges[session]
        native = native_reward(upstream_url(bridge.url), row, rollout.made_in(session))
        model_side = verify_transcript(
            bridge, rollout.token(session), rollout.stub.transcript(rollout.events)
        )
        assert model_side["reward"] == native == expected, (case, session, model_side["reward"], native)
        # exec --json names the server as configured (`mcp__gym.bridge`), resolved from B's own name
        response = run_codex.exec_events_to_response(rollout.events)
        converted = run_codex.verify(bridge.url, rollout.token(session), response=response)
        assert converted["reward"] == native, (case, session, converted["reward"], native)
