"""A stub Anthropic Messages API (``POST /v1/messages``, SSE streaming) that replays a solution.

It is not a model and not a policy: it answers each turn of the agent loop with the next tool call
of a fixed ``solution`` (read from the row's own ground truth by the test), addressed to the tool
the client offered for it (Claude Code offers MCP tools as ``mcp__<server>__<tool>``; the stub
picks the offered name whose tool part is the solution's tool, and records the name it used).
After the last call it answers with a short text. Requests that carry no tool of the solution
(Claude Code's side requests: titles, quota probes) get a one-word text answer.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.harness import LocalStub, StubHandler

Solution = list[tuple[str, dict[str, Any]]]


class StubAnthropicMessages(LocalStub):
    def __init__(self, solution: Solution, final_text: str = "Done.") -> None:
        self.solution = solution
        self.final_text = final_text
        self.requests: list[dict[str, Any]] = []  # every /v1/messages body
        self.loop_requests: list[dict[str, Any]] = []  # the ones that offered the solution's tools
        self.emitted: list[str] = []  # tool names the stub called, as offered by the client
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.root_url

    # -- the answer --------------------------------------------------------------------------

    @staticmethod
    def offered(body: dict[str, Any]) -> list[str]:
        return [str(t["name"]) for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t]

    def _offered_for(self, tool: str, offered: list[str]) -> str | None:
        """The offered name for ``tool``: itself, or ``mcp__<server>__<tool>`` (one server only)."""
        if tool in offered:
            return tool
        found = [n for n in offered if n.startswith("mcp__") and n.endswith(f"__{tool}")]
        return found[0] if len(found) == 1 else None

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for this request (the non-streaming shape)."""
        with self._lock:
            self.requests.append(body)
            offered = self.offered(body)
            tools = {tool for tool, _ in self.solution}
            is_loop = any(self._offered_for(t, offered) for t in tools) if tools else bool(offered)
            content: list[dict[str, Any]]
            stop = "end_turn"
            if not is_loop:
                content = [{"type": "text", "text": "Stub."}]
            else:
                self.loop_requests.append(body)
                step = sum(
                    1
                    for m in body.get("messages") or []
                    if m.get("role") == "user" and isinstance(m.get("content"), list)
                    for b in m["content"]
                    if isinstance(b, dict) and b.get("type") == "tool_result"
                )
                if step < len(self.solution):
                    tool, arguments = self.solution[step]
                    name = self._offered_for(tool, offered)
                    if name is None:
                        content = [{"type": "text", "text": f"stub: {tool!r} not offered: {offered}"}]
                    else:
                        self.emitted.append(name)
                        content = [
                            {
                                "type": "tool_use",
                                "id": f"toolu_stub_{step:02d}",
                                "name": name,
                                "input": arguments,
                            }
                        ]
                        stop = "tool_use"
                else:
                    content = [{"type": "text", "text": self.final_text}]
            return {
                "id": f"msg_stub_{len(self.requests)}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "stub"),
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 10},
            }

    @staticmethod
    def events(message: dict[str, Any]) -> list[dict[str, Any]]:
        """The message as the Messages API's stream events."""
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 100, "output_tokens": 1},
        }
        out: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        for index, block in enumerate(message["content"]):
            if block["type"] == "tool_use":
                opened = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                opened = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            out += [
                {"type": "content_block_start", "index": index, "content_block": opened},
                {"type": "content_block_delta", "index": index, "delta": delta},
                {"type": "content_block_stop", "index": index},
            ]
        out += [
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
            {"type": "message_stop"},
        ]
        return out

    def _handler(self) -> type[StubHandler]:
        stub = self

        class Handler(StubHandler):
            paths = stub.paths
            not_found = b'{"type":"error","error":{"type":"not_found_error","message":"stub"}}'

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def do_POST(self) -> None:
                stub.paths.append(f"POST {self.path}")
                raw = self._read()
                path = self.path.split("?", 1)[0].rstrip("/")
                if path.endswith("/messages/count_tokens"):
                    self._send(200, b'{"input_tokens": 100}', "application/json")
                    return
                if not path.endswith("/messages"):
                    self._send(
                        404,
                        b'{"type":"error","error":{"type":"not_found_error","message":"stub"}}',
                        "application/json",
                    )
                    return
                body = json.loads(raw)
                message = stub.answer(body)
                if body.get("stream"):
                    payload = "".join(
                        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in stub.events(message)
                    ).encode()
                    self._send(200, payload, "text/event-stream")
                else:
                    self._send(200, json.dumps(message).encode(), "application/json")

        return Handler
