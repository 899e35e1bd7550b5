"""A stub OpenAI Chat Completions API (``POST <base>/chat/completions``, streamed as SSE chunks or
as one JSON object) that replays a solution.

Not a model: each request's ``model`` names a plan (one per rollout, registered by the test with
the calls read from the row); each turn gets the next call of that plan (the turn is the number of
``role: tool`` messages so far), addressed to the function the client offered for that tool (the
offered name equal to the tool or ending in ``_<tool>``; one match only), and after the last call
a text answer. Offered and emitted names are recorded per plan.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fixtures.harness import LocalStub, Solution, StubHandler


@dataclass
class ChatPlan:
    solution: Solution
    final_text: str = "Done."
    offered: list[list[str]] = field(default_factory=list)  # the tool names of each request
    emitted: list[str] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


class StubChatCompletions(LocalStub):
    def __init__(self) -> None:
        self.plans: dict[str, ChatPlan] = {}
        self.unknown: list[str] = []  # requests naming no plan (or a tool that was not offered)
        super().__init__()

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def add(self, model: str, solution: Solution, final_text: str = "Done.") -> ChatPlan:
        plan = self.plans[model] = ChatPlan(solution, final_text)
        return plan

    @staticmethod
    def _offered_for(tool: str, offered: list[str]) -> str | None:
        if tool in offered:
            return tool
        found = [n for n in offered if n.endswith(f"_{tool}")]
        return found[0] if len(found) == 1 else None

    def message(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The assistant message answering ``body`` and its finish reason."""
        with self._lock:
            model = str(body.get("model"))
            plan = self.plans.get(model)
            if plan is None:
                self.unknown.append(f"no plan for model {model!r}")
                return {"role": "assistant", "content": "stub: no plan"}, "stop"
            plan.requests.append(body)
            offered = [
                str(t["function"]["name"]) for t in body.get("tools") or [] if t.get("type") == "function"
            ]
            plan.offered.append(offered)
            step = sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")
            if step >= len(plan.solution):
                return {"role": "assistant", "content": plan.final_text}, "stop"
            tool, arguments = plan.solution[step]
            name = self._offered_for(tool, offered)
            if name is None:
                self.unknown.append(f"{model}: {tool!r} not offered: {offered}")
                return {"role": "assistant", "content": f"stub: {tool!r} not offered"}, "stop"
            plan.emitted.append(name)
            call = {
                "id": f"call_stub_{step}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        message, finish = self.message(body)
        return {
            "id": f"chatcmpl-stub-{len(self.paths)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }

    def chunks(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The same answer as ``chat.completion.chunk`` events: the message, the finish, usage."""
        message, finish = self.message(body)
        head = {
            "id": f"chatcmpl-stub-{len(self.paths)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model"),
        }
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if "tool_calls" in message:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        return [
            {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {
                **head,
                "choices": [],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            },
        ]

    def _handler(self) -> type[StubHandler]:
        stub = self

        class Handler(StubHandler):
            paths = stub.paths
            not_found = b'{"error": {"message": "stub"}}'

            def do_POST(self) -> None:
                stub.paths.append(f"POST {self.path}")
                raw = self._read()
                body = json.loads(raw) if raw else {}
                if not self.path.split("?", 1)[0].endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "stub"}}', "application/json")
                elif body.get("stream"):
                    events = [f"data: {json.dumps(c)}\n\n" for c in stub.chunks(body)]
                    self._send(200, ("".join(events) + "data: [DONE]\n\n").encode(), "text/event-stream")
                else:
                    self._send(200, json.dumps(stub.completion(body)).encode(), "application/json")

        return Handler
