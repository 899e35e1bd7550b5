"""Shared pieces of the harness rollout tests (``tests/test_clients_*.py``).

* ``counter_solution`` / ``ground_truth_solution``: the calls a stub model replays for a row,
  read from the row itself (it is a stub, not a policy).
* ``native_reward``: the same calls made directly on the Gym resources server behind the bridge
  (no bridge, no MCP: Gym's own HTTP contract with its cookie), then Gym's ``/verify``: the
  reward a bridged rollout must equal.
* ``check_names``: the tool names a real client emitted, compared with (or, with
  ``GYM_MCP_BRIDGE_WRITE_CLIENT_NAMES=1``, written to) ``tests/fixtures/client_names/<client>.json``.
* ``LocalStub``: a local HTTP server in a thread (the stub model APIs, a recording proxy).
"""

from __future__ import annotations

import json
import os
import threading
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import httpx

from bridge.scoring.trajectory import from_openai_chat
from tests.interop.client_names import FIXTURES, write_fixture

Solution = list[tuple[str, dict[str, Any]]]
WRITE_ENV = "GYM_MCP_BRIDGE_WRITE_CLIENT_NAMES"


class StubHandler(BaseHTTPRequestHandler):
    """What every stub's request handler shares: no request log, each answer sent whole with its
    length (``_send``), the body read by its length (``_read``), and ``GET`` answered 404 with the
    API's own error shape (``not_found``), each path recorded in ``paths`` (the stub's list)."""

    paths: list[str]
    not_found = b'{"error": {"message": "stub"}}'

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _read(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def do_GET(self) -> None:
        self.paths.append(f"GET {self.path}")
        self._send(404, self.not_found)


class LocalStub:
    """A local HTTP server on 127.0.0.1 (a free port) served from a thread while used as a context
    manager. Subclasses set their own state, then call ``super().__init__()``, and give their
    request handler class (a ``StubHandler``) from ``_handler``."""

    def __init__(self) -> None:
        self.paths: list[str] = []  # every request's method and path, in arrival order
        self._lock = threading.Lock()  # for the subclass's state: requests arrive on many threads
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


def counter_solution(row: dict[str, Any]) -> Solution:
    """Counter rows: take the count from ``initial_count`` to ``expected_count``, then read it."""
    return [
        ("increment_counter", {"count": row["expected_count"] - row["initial_count"]}),
        ("get_counter_value", {}),
    ]


def ground_truth_solution(row: dict[str, Any]) -> Solution:
    """workplace_assistant: the row's ``ground_truth`` function calls, in order."""
    return [(call["name"], json.loads(call["arguments"])) for call in row["ground_truth"]]


def upstream_url(bridge_url: str) -> str:
    """The Gym resources server a managed bridge runs (from its ``/healthz``)."""
    return str(httpx.get(f"{bridge_url}/healthz", timeout=10).json()["upstream"]["url"])


def native_reward(upstream: str, row: dict[str, Any], solution: Solution, final_text: str = "Done.") -> float:
    """Seed, call ``solution`` and verify directly on the Gym server: the native reward."""
    messages: list[dict[str, Any]] = []
    with httpx.Client(base_url=upstream, timeout=60) as gym:
        gym.post("/seed_session", json=row).raise_for_status()
        for index, (tool, arguments) in enumerate(solution):
            answer = gym.post(f"/{tool}", json=arguments)
            call = {
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(arguments)},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"call_{index}", "content": answer.text})
        response = from_openai_chat(messages, final_text)
        verified = gym.post("/verify", json={**row, "response": response})
        verified.raise_for_status()
        return float(verified.json()["reward"])


def check_names(client: str, header: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    """Every name this run emitted is in the stored fixture (with ``GYM_MCP_BRIDGE_WRITE_CLIENT_NAMES=1``:
    merged into it; a fixture of another client version is replaced)."""
    path = FIXTURES / f"{client}.json"
    key = ("server", "tool", "emitted", "namespace")
    stored = json.loads(path.read_text()) if path.exists() else None
    if os.environ.get(WRITE_ENV) == "1":
        same = stored is not None and stored.get("version") == header["version"]
        kept = list(stored["cases"]) if stored and same else []
        seen = {tuple(c[k] for k in key) for c in kept}
        new = [c for c in cases if tuple(c[k] for k in key) not in seen]
        if stored and same and not new:
            return  # nothing new: the stored fixture (and the header of whoever captured it) stays
        head = {k: v for k, v in stored.items() if k != "cases"} if stored and same else {}
        head = head or {"client": client, **header, "captured": date.today().isoformat()}
        write_fixture(path, head, kept + new)
        return
    assert stored is not None, f"{path} is missing: run this test once with {WRITE_ENV}=1"
    assert stored["version"] == header["version"], (stored["version"], header["version"])
    known = {tuple(c[k] for k in key) for c in stored["cases"]}
    missing = [c for c in cases if tuple(c[k] for k in key) not in known]
    assert not missing, f"names not in {path.name}: {missing}"
