"""A stub Gym model server: ``POST /v1/responses`` answering with a non-streaming Responses API
object, the contract Gym's agents (``simple_agent``) expect of a ``responses_api_models`` server.

It is not a model and not a policy: for each request it finds the row it belongs to (by the
row's first user message and the ``metadata`` tag ``stub_plan`` of its ``responses_create_params``)
and answers with the next function call of that row's registered solution (the step is the
number of ``function_call_output`` items already in the input), then with the plan's final text.
Rows come from the shipped data: ``example_multi_step``'s recorded rollout calls,
``workplace_assistant``'s ``ground_truth`` (``tests/fixtures/harness.py``).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fixtures.harness import LocalStub, StubHandler

Solution = list[tuple[str, dict[str, Any]]]
PLAN_TAG = "stub_plan"
ROLLOUT_PREFIX = re.compile(r"^/ng-rollout/[^/]+(?=/)")


@dataclass
class Plan:
    solution: Solution
    final_text: str = "Done."


def first_user_text(create_params: dict[str, Any]) -> str:
    """The first user message's text of a ``responses_create_params`` (or of a request body)."""
    items = create_params.get("input")
    if isinstance(items, str):
        return items
    for item in items or []:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))
    raise ValueError("no user message in the input")


def plan_key(create_params: dict[str, Any]) -> tuple[str, str]:
    return first_user_text(create_params), str((create_params.get("metadata") or {}).get(PLAN_TAG, ""))


class StubGymModelServer(LocalStub):
    def __init__(self) -> None:
        self.plans: dict[tuple[str, str], Plan] = {}
        self.requests: list[dict[str, Any]] = []
        self.emitted: list[str] = []  # function-call names the stub answered with
        self.offered: set[str] = set()  # tool names the agent offered
        self.unknown: list[str] = []  # requests that matched no registered row
        self._ids = itertools.count()
        super().__init__()

    def add(self, create_params: dict[str, Any], plan: Plan) -> None:
        self.plans[plan_key(create_params)] = plan

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_stub_{next(self._ids)}"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            self.offered.update(str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict))
            key = plan_key(body)
            plan = self.plan_for(body)
            step = sum(
                1
                for i in body.get("input") or []
                if isinstance(i, dict) and i.get("type") == "function_call_output"
            )
            output: list[dict[str, Any]]
            if plan is None:
                self.unknown.append(key[0][:80])
                output = [self._message("No plan registered for this row.")]
            elif step < len(plan.solution):
                name, arguments = plan.solution[step]
                call: dict[str, Any] = {
                    "type": "function_call",
                    "id": self._next_id("fc"),
                    "call_id": self._next_id("call"),
                    "name": name,
                    "arguments": json.dumps(arguments),
                    "status": "completed",
                }
                call.update(self.called_as(name, body))
                self.emitted.append(str(call["name"]))
                output = [call]
            else:
                output = [self._message(plan.final_text)]
        return {
            "id": self._next_id("resp"),
            "object": "response",
            "created_at": time.time(),
            "model": body.get("model") or "gym-stub-model",
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "metadata": body.get("metadata"),
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "temperature": None,
            "top_p": None,
            "usage": {
                "input_tokens": 1,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 2,
            },
        }

    def plan_for(self, body: dict[str, Any]) -> Plan | None:
        return self.plans.get(plan_key(body))

    def called_as(self, tool: str, body: dict[str, Any]) -> dict[str, str]:
        """The name (and namespace) to call ``tool`` by in an answer to ``body``: as planned."""
        return {}

    def _message(self, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": self._next_id("msg"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def _handler(self) -> type[StubHandler]:
        stub = self

        class Handler(StubHandler):
            protocol_version = "HTTP/1.1"
            paths = stub.paths
            not_found = b'{"detail": "Not Found"}'

            def do_POST(self) -> None:
                body = json.loads(self._read() or b"{}")
                self.paths.append(f"POST {self.path}")
                # Gym 0.7 with observability_enabled sends model calls under /ng-rollout/<id>/
                if ROLLOUT_PREFIX.sub("", self.path).rstrip("/") != "/v1/responses":
                    self._send(404, self.not_found)
                else:
                    self._send(200, json.dumps(stub.answer(body)).encode())

        return Handler


class StubPolicyEndpoint(StubGymModelServer):
    """The same answers for a model behind Gym's ``openai_model`` that harness CLIs talk to (Claude
    Code through ``/v1/messages``, Codex through ``/v1/responses``; Gym's model server turns both into
    a Responses request here). A CLI wraps the row's prompt in text of its own and drops the row's
    metadata, so a request belongs to the plan whose registered prompt is the longest one contained
    in the request's text; the planned tool is called by the name the request offered for it: the
    name itself, a namespace child of that name (Codex), or the one offered name ending in
    ``_<tool>`` (``mcp__<server>__<tool>``).

    ``armed`` (a row's first user text -> a hook) is where a test breaks a rollout mid-run: the hook
    runs once, outside the lock, before the answer to the model request that follows that row's
    first tool output."""

    def __init__(self) -> None:
        self.armed: dict[str, Callable[[], None]] = {}
        super().__init__()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        step = sum(
            1
            for i in body.get("input") or []
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        )
        hook = self.armed.pop(first_user_text(body), None) if step == 1 else None
        if hook is not None:
            hook()
        return super().answer(body)

    def plan_for(self, body: dict[str, Any]) -> Plan | None:
        text = json.dumps(body.get("input"))
        found = [
            (len(prompt), plan)
            for (prompt, _), plan in self.plans.items()
            if json.dumps(prompt)[1:-1] in text
        ]
        return max(found, key=lambda pair: pair[0])[1] if found else None

    def called_as(self, tool: str, body: dict[str, Any]) -> dict[str, str]:
        flat: list[str] = []
        for offer in body.get("tools") or []:
            if not isinstance(offer, dict):
                continue
            if offer.get("type") == "namespace":
                for child in offer.get("tools") or []:
                    if isinstance(child, dict) and child.get("name") == tool:
                        return {"namespace": str(offer.get("name")), "name": tool}
            elif isinstance(offer.get("name"), str):
                flat.append(offer["name"])
        if tool in flat:
            return {"name": tool}
        ends = [name for name in flat if name.endswith(f"_{tool}")]
        return {"name": ends[0]} if len(ends) == 1 else {}
