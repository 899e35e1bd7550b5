"""A stub Gemini API (``models/<m>:generateContent`` / ``:streamGenerateContent?alt=sse``) that
replays a solution.

Not a model: each turn of the agent loop gets the next ``functionCall`` of a fixed ``solution``
(read from the row by the test), addressed to the function declaration the client offered for
that tool (Gemini CLI offers MCP tools as ``mcp_<server>_<tool>``; the stub takes the offered
name equal to the tool or ending in ``_<tool>``, or a cut name whose tail after ``...`` ends
``_<tool>``; one match only, and records it). After the last
call it answers with text. Requests that offer none of the solution's tools (the CLI's side
requests) get a short text answer.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.harness import LocalStub, StubHandler

Solution = list[tuple[str, dict[str, Any]]]


class StubGeminiApi(LocalStub):
    def __init__(self, solution: Solution, final_text: str = "Done.") -> None:
        self.solution = solution
        self.final_text = final_text
        self.requests: list[dict[str, Any]] = []
        self.loop_requests: list[dict[str, Any]] = []
        self.emitted: list[str] = []
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.root_url

    @staticmethod
    def offered(body: dict[str, Any]) -> list[str]:
        return [
            str(d["name"])
            for tool in body.get("tools") or []
            for d in tool.get("functionDeclarations") or tool.get("function_declarations") or []
        ]

    @staticmethod
    def _offered_for(tool: str, offered: list[str]) -> str | None:
        if tool in offered:
            return tool
        found = [n for n in offered if n.endswith(f"_{tool}")]
        if not found:  # past 63 characters the CLI keeps the first 30 + "..." + the last 30
            found = [n for n in offered if "..." in n and f"_{tool}".endswith(n.split("...", 1)[1])]
        return found[0] if len(found) == 1 else None

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            offered = self.offered(body)
            tools = {tool for tool, _ in self.solution}
            parts: list[dict[str, Any]]
            if not any(self._offered_for(t, offered) for t in tools):
                parts = [{"text": "Stub."}]
            else:
                self.loop_requests.append(body)
                step = sum(
                    1
                    for content in body.get("contents") or []
                    for part in content.get("parts") or []
                    if "functionResponse" in part
                )
                if step < len(self.solution):
                    tool, arguments = self.solution[step]
                    name = self._offered_for(tool, offered)
                    if name is None:
                        parts = [{"text": f"stub: {tool!r} not offered: {offered}"}]
                    else:
                        self.emitted.append(name)
                        parts = [
                            {"functionCall": {"id": f"call_stub_{step}", "name": name, "args": arguments}}
                        ]
                else:
                    parts = [{"text": self.final_text}]
            return {
                "candidates": [
                    {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
                ],
                "usageMetadata": {
                    "promptTokenCount": 100,
                    "candidatesTokenCount": 10,
                    "totalTokenCount": 110,
                },
                "modelVersion": "gemini-stub",
                "responseId": f"stub-{len(self.requests)}",
            }

    def _handler(self) -> type[StubHandler]:
        stub = self

        class Handler(StubHandler):
            paths = stub.paths
            not_found = b'{"error": {"code": 404, "message": "stub"}}'

            def do_POST(self) -> None:
                stub.paths.append(f"POST {self.path}")
                raw = self._read()
                path = self.path.split("?", 1)[0]
                body = json.loads(raw) if raw else {}
                if path.endswith(":countTokens"):
                    self._send(200, b'{"totalTokens": 100}', "application/json")
                elif path.endswith(":streamGenerateContent"):
                    payload = f"data: {json.dumps(stub.answer(body))}\r\n\r\n".encode()
                    self._send(200, payload, "text/event-stream")
                elif path.endswith(":generateContent"):
                    self._send(200, json.dumps(stub.answer(body)).encode(), "application/json")
                else:
                    self._send(404, b'{"error": {"code": 404, "message": "stub"}}', "application/json")

        return Handler
