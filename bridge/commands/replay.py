"""``gym-mcp-bridge replay ROLLOUTS.jsonl``: prove a rollout driven over MCP scores like over HTTP.

For each record (a Gym rollout: the row's fields, a Responses ``response`` and its recorded
``reward``; or a row whose ``ground_truth`` actions are replayed with ``--from ground-truth``):

1. the row is found: the record itself, or the ``--rows`` file joined by Gym's ``_ng_task_index``
   (when that row has the record's prompt), by ``id`` or by prompt
   (``responses_create_params.input``); a record with no row is reported, never guessed;
2. a session is seeded through the bridge, and every recorded ``function_call`` is re-issued as an
   MCP ``tools/call`` with the official SDK client (arguments from the record);
3. the trajectory's calls are renamed the way a harness would (``--as claude-code``, ``codex``,
   ``gemini``, ...; ``naming.render``), their outputs replaced by what the calls returned now;
4. ``/verify`` through the bridge scores it; with ``--native`` the same calls are also replayed
   and scored directly against the upstream over Gym's HTTP with bare names;
5. the bridge's reward is compared with the recorded one (and the native one).

Prints a progress bar on a terminal, then a table (or ``--json``); exits 1 on any mismatch or when
nothing could be verified.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bridge.scoring import naming, trajectory

ROLLOUT_ONLY = frozenset({"response", "reward"})


@dataclass
class Outcome:
    index: int
    status: str  # match | MISMATCH | unverifiable | error
    detail: str = ""
    recorded: float | None = None
    native: float | None = None
    bridge: float | None = None
    calls: int = 0
    emitted: list[str] = field(default_factory=list)
    normalized: dict[str, str] = field(default_factory=dict)
    unresolved: list[dict[str, str]] = field(default_factory=list)  # {"name", "reason"}


def _prompt_key(row: dict[str, Any]) -> str:
    """The prompt as (role, text) pairs: rollouts re-serialize input items with ``type: message``."""
    params = row.get("responses_create_params") or {}
    items = params.get("input")
    if not isinstance(items, list):
        return json.dumps(items, sort_keys=True)
    pairs = [
        (item.get("role"), item.get("content")) if isinstance(item, dict) else (None, item) for item in items
    ]
    return json.dumps(pairs, sort_keys=True)


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            value = json.loads(line)
            if not isinstance(value, dict):
                raise ValueError(f"{path}:{number}: not a JSON object")
            records.append(value)
    return records


def join_row(record: dict[str, Any], rows: list[dict[str, Any]] | None) -> tuple[dict[str, Any] | None, str]:
    """The row fields for a record, and why not when none can be found."""
    if rows is None:
        return {k: v for k, v in record.items() if k not in ROLLOUT_ONLY}, ""
    key = _prompt_key(record)
    # Gym's collection writes the row's position in its input file; trusted only when that row
    # has the record's prompt (a rollout file collected from a larger data set has other rows).
    index = record.get("_ng_task_index")
    if type(index) is int and 0 <= index < len(rows) and _prompt_key(rows[index]) == key:
        return rows[index], ""
    if "id" in record:
        by_id = [r for r in rows if r.get("id") == record["id"]]
        if len(by_id) == 1:
            return by_id[0], ""
    matches = [r for r in rows if _prompt_key(r) == key]
    if len(matches) == 1:
        return matches[0], ""
    if not matches:
        return None, "no row in --rows has this record's id or prompt"
    return None, f"{len(matches)} rows in --rows share this record's prompt"


def ground_truth_response(row: dict[str, Any], drop_last: bool) -> dict[str, Any]:
    actions = row.get("ground_truth")
    if not isinstance(actions, list):
        raise ValueError("row has no ground_truth list")
    if drop_last:
        actions = actions[:-1]
    output = []
    for action in actions:
        arguments = action.get("arguments", "{}")
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex}",
                "call_id": call_id,
                "name": action["name"],
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "status": "completed",
            }
        )
        output.append({"type": "function_call_output", "call_id": call_id, "output": ""})
    return trajectory.from_openai_chat([]) | {"output": output}


def _reward(payload: Any) -> float | None:
    value = payload.get("reward") if isinstance(payload, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _arguments(item: dict[str, Any]) -> dict[str, Any]:
    raw = item.get("arguments") or "{}"
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise ValueError(f"arguments of {item.get('name')} are not a JSON object")
    return value


@contextlib.asynccontextmanager
async def seeded_client(
    http: httpx.AsyncClient, row: dict[str, Any], timeout: float = 120
) -> AsyncIterator[tuple[dict[str, Any], Any]]:
    """Seed a session with ``row`` through the bridge ``http`` points at; yield the seed answer's
    ``mcp`` metadata and the official MCP SDK client on that session (closed on exit)."""
    # Imported here, not at the top: ``serve`` builds this command's parser too, and must not wait
    # for the MCP client side to import before it starts the upstream.
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    seed = await http.post("/seed_session", json=row)
    if seed.status_code != 200:
        raise RuntimeError(f"seed answered HTTP {seed.status_code}: {seed.text[:300]}")
    mcp = seed.json()["mcp"]
    async with (
        httpx2.AsyncClient(headers=mcp["headers"], timeout=timeout) as mcp_http,
        Client(streamable_http_client(mcp["url"], http_client=mcp_http), mode="legacy") as client,
    ):
        yield mcp, client


def result_text(result: Any) -> str:
    """The text parts of an MCP ``CallToolResult``, joined."""
    return "".join(getattr(part, "text", "") for part in result.content)


async def replay_over_mcp(
    http: httpx.AsyncClient,
    row: dict[str, Any],
    response: dict[str, Any],
    convention: str,
    server_alias: str | None,
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Seed, re-issue the calls over MCP, verify the renamed trajectory. Returns (verify JSON, response, emitted)."""
    response = copy.deepcopy(response)
    calls = trajectory.function_calls(response)
    outputs: dict[str, str] = {}
    async with seeded_client(http, row) as (mcp, client):
        for item in calls:
            outputs[item["call_id"]] = result_text(await client.call_tool(item["name"], _arguments(item)))
    server = server_alias or mcp["server_name"]
    if convention == "claude-plugin" and ":" not in server:
        server = f"gym:{server}"
    emitted = []
    for item in calls:
        item["name"] = naming.render(item["name"], server, convention)
        emitted.append(item["name"])
    for item in response.get("output", []):
        if (
            isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and item.get("call_id") in outputs
        ):
            item["output"] = outputs[item["call_id"]]
    verdict = await http.post("/verify", json={"response": response}, headers=mcp["headers"])
    if verdict.status_code != 200:
        raise RuntimeError(f"verify answered HTTP {verdict.status_code}: {verdict.text[:300]}")
    return dict(verdict.json()), response, emitted


async def replay_native(upstream_url: str, row: dict[str, Any], response: dict[str, Any]) -> float | None:
    """The same calls and verify straight to the upstream over Gym's HTTP with bare names."""
    async with httpx.AsyncClient(base_url=upstream_url, timeout=300) as http:
        seed = await http.post("/seed_session", json=row)
        seed.raise_for_status()
        answer = seed.json()
        metadata = answer.get("mcp") if isinstance(answer, dict) else None
        # An MCP-native upstream (Gym's MCPResourcesServer) serves its tools on its own /mcp, reached
        # with the token of its seed answer, as Gym's MCP agents reach it.
        mcp_headers = metadata.get("headers") if isinstance(metadata, dict) else None
        for number, item in enumerate(trajectory.function_calls(response)):
            if isinstance(mcp_headers, dict) and mcp_headers:
                call = {"name": item["name"], "arguments": _arguments(item)}
                await http.post(
                    "/mcp",
                    json={"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": call},
                    headers={**mcp_headers, "accept": "application/json, text/event-stream"},
                )
            else:
                await http.post(f"/{item['name']}", json=_arguments(item))
        verdict = await http.post("/verify", json={**row, "response": response})
        verdict.raise_for_status()
        return _reward(verdict.json())


async def replay_one(
    index: int,
    record: dict[str, Any],
    rows: list[dict[str, Any]] | None,
    args: argparse.Namespace,
    upstream_url: str | None,
) -> Outcome:
    row, why = join_row(record, rows)
    if row is None:
        return Outcome(index, "unverifiable", why)
    try:
        if args.source == "ground-truth":
            response = ground_truth_response(row, args.drop_last)
            recorded = None
        else:
            if not isinstance(record.get("response"), dict):
                return Outcome(index, "unverifiable", "record has no response object")
            response = record["response"]
            recorded = _reward(record)
        async with httpx.AsyncClient(base_url=args.bridge_url, timeout=300) as http:
            verdict, _, emitted = await replay_over_mcp(
                http, row, response, args.convention, args.server_alias
            )
        native = await replay_native(upstream_url, row, response) if upstream_url else None
    except Exception as exc:  # reported per record; one bad record does not stop the run
        return Outcome(index, "error", f"{type(exc).__name__}: {exc}".splitlines()[0])
    report = verdict.get("_bridge", {})
    outcome = Outcome(
        index,
        "match",
        recorded=recorded,
        native=native,
        bridge=_reward(verdict),
        calls=len(emitted),
        emitted=emitted,
        normalized=report.get("normalized", {}),
        unresolved=report.get("unresolved", []),
    )
    expected = [v for v in (recorded, native) if v is not None]
    if outcome.bridge is None:
        outcome.status, outcome.detail = "error", "verify returned no reward"
    elif not expected:
        outcome.status, outcome.detail = "unverifiable", "no recorded reward and --native not given"
    elif any(abs(outcome.bridge - v) > 1e-9 for v in expected):
        outcome.status = "MISMATCH"
    return outcome


class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.enabled = sys.stderr.isatty()

    def step(self) -> None:
        self.done += 1
        if self.enabled:
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def table(outcomes: list[Outcome], convention: str) -> str:
    def show(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    lines = [f"{'#':>4}  {'status':<12} {'recorded':>8} {'native':>7} {'bridge':>7} {'calls':>5}  detail"]
    for o in outcomes:
        shown = ", ".join(f"{u.get('name')} ({u.get('reason')})" for u in o.unresolved)
        detail = o.detail or (f"unresolved: {shown}" if o.unresolved else "")
        lines.append(
            f"{o.index:>4}  {o.status:<12} {show(o.recorded):>8} {show(o.native):>7} {show(o.bridge):>7} {o.calls:>5}  {detail}"
        )
    counts = {s: sum(o.status == s for o in outcomes) for s in ("match", "MISMATCH", "unverifiable", "error")}
    lines.append(
        f"as {convention}: {counts['match']} match, {counts['MISMATCH']} mismatch, "
        f"{counts['unverifiable']} unverifiable, {counts['error']} error, of {len(outcomes)}"
    )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> int:
    records = load_jsonl(args.rollouts)
    rows = load_jsonl(args.rows) if args.rows else None
    upstream_url = None
    if args.native:
        health = httpx.get(f"{args.bridge_url}/healthz", timeout=10).json()
        upstream_url = health["upstream"]["url"]
    progress = Progress(len(records))
    limit = asyncio.Semaphore(args.concurrency)

    async def one(index: int, record: dict[str, Any]) -> Outcome:
        async with limit:
            outcome = await replay_one(index, record, rows, args, upstream_url)
        progress.step()
        return outcome

    outcomes = await asyncio.gather(*(one(i, r) for i, r in enumerate(records)))
    if args.json:
        print(json.dumps({"convention": args.convention, "results": [asdict(o) for o in outcomes]}, indent=2))
    else:
        print(table(outcomes, args.convention))
    if any(o.status in ("MISMATCH", "error") for o in outcomes):
        return 1
    return 0 if any(o.status == "match" for o in outcomes) else 1


def cmd_replay(args: argparse.Namespace) -> int:
    args.bridge_url = args.bridge_url.rstrip("/")
    try:
        return asyncio.run(run(args))
    except (OSError, ValueError, httpx.HTTPError) as exc:
        print(f"gym-mcp-bridge replay: {exc}".splitlines()[0], file=sys.stderr)
        return 2


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "replay",
        help="replay Gym rollouts through a running bridge over MCP and compare rewards",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "rollouts", type=Path, help="JSONL of Gym rollouts (or rows, with --from ground-truth)"
    )
    parser.add_argument("--rows", type=Path, help="JSONL of the rows to join by id or prompt")
    parser.add_argument("--bridge-url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--as",
        dest="convention",
        default="claude-code",
        choices=naming.CONVENTIONS,
        help="harness naming to emit",
    )
    parser.add_argument(
        "--server-alias", help="the name the harness gave the MCP server (default: server_name)"
    )
    parser.add_argument(
        "--from",
        dest="source",
        default="response",
        choices=("response", "ground-truth"),
        help="where the calls come from",
    )
    parser.add_argument(
        "--drop-last", action="store_true", help="with --from ground-truth: drop the last action"
    )
    parser.add_argument(
        "--native", action="store_true", help="also score each rollout directly against the upstream"
    )
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=cmd_replay)
