"""Evaluate a Gym benchmark through gym-mcp-bridge with NeMo Evaluator's own classes (0.3.0).

Runs in NeMo Evaluator's environment (``make evaluator-env`` builds one: ``.cache/evaluator-env``),
not the bridge's. Everything it drives is the Evaluator's public API, unmodified:
``GymEnvironment`` / ``ManagedGymEnvironment`` with the ``native`` protocol and a ``GymDataset``
(the rows), ``run_evaluation`` (its seed -> solve -> verify loop), ``GymSolver`` (a Gym agent's
``/run``, whose reward is Gym's own) and ``HttpToolBackend`` (tools listed from ``/openapi.json``,
called as ``POST /<tool>``).

Where the resources server is:

  --resources-url http://localhost:8000             a running bridge (or Gym server)
  --resources-url http://eval:KEY@localhost:8000    a bridge with an API key: the Evaluator's HTTP
                                                    session takes no headers, so the key goes in the
                                                    URL and arrives as Authorization: Basic
  --serve 'exec gym-mcp-bridge serve --resources-server math_proof_judgement --host 127.0.0.1
           --port $PORT --listen-when-ready'        the Evaluator starts and stops the bridge itself
                                                    (ManagedGymEnvironment; see README.md for why
                                                    ``exec`` and ``--listen-when-ready``)

Who answers:

  (default)            FixedAnswerSolver: a fixed-answer solver standing in for a model, every row
                       answered with --answer; the Evaluator's own native /verify scores it
  --agent-url URL      GymSolver(trust_reward=True): a Gym agent server (simple_agent) runs each row
                       against the resources server and its model, and Gym's /verify reward counts

Prints one JSON line per row (``{"row", "reward"}``; a row the Evaluator recorded as failed, e.g.
Gym's 422, has ``"status"``/``"error"`` and no reward), then ``{"summary": ...}``: the mean reward of
the rows scored, none when no row was. When no row could be scored because the bridge could not be
reached or refused the credentials, it exits 2 with one line naming the cause, never a mean reward.
``--list-tools`` prints the tools ``HttpToolBackend`` lists; ``--call NAME JSON`` (repeatable) calls
tools through it, in order, on one HTTP session (its cookies: see README.md on ``localhost`` vs
``127.0.0.1``). A failure is one line on stderr (credentials in the URL never shown), exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from nemo_evaluator.engine.eval_loop import run_evaluation
from nemo_evaluator.environments.base import EvalEnvironment, SeedResult
from nemo_evaluator.environments.gym import GymDataset, GymEnvironment, ManagedGymEnvironment
from nemo_evaluator.solvers.base import SolveResult
from nemo_evaluator.solvers.gym import GymSolver
from nemo_evaluator.solvers.tool_backend import HttpToolBackend

_STATUS = re.compile(r"^(\d{3}), message=")  # aiohttp's ClientResponseError text
_UNREACHABLE = (
    "Cannot connect to host",
    "Connection refused",
    "Server disconnected",
    "Name or service not known",
)


class SetupFailed(Exception):
    """Nothing was scored because of how the run is set up: one line saying what to fix."""


def shown_url(url: str) -> str:
    """``url`` without the credentials it may carry (the API key)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redacted(text: str, url: str | None) -> str:
    """``text`` (an error message) without the credentials of ``url``; its first line."""
    line = (text.strip().splitlines() or [""])[0]
    if url:
        line = line.replace(url, shown_url(url))
        password = urlsplit(url).password
        if password and len(password) >= 4:  # the key itself, wherever the message quotes it
            line = line.replace(password, "***")
    return line


def setup_failure(rows: list[dict[str, Any]], where: str) -> str | None:
    """Why no row was scored, when the cause is the run's setup (the bridge unreachable, or the key
    refused) rather than the rows; None when some row was scored or the rows themselves failed."""
    if not rows or any("error" not in row for row in rows):
        return None
    statuses = {row.get("status") for row in rows}
    if statuses <= {401, 403}:
        return (
            f"the bridge at {where} refused every row ({'/'.join(str(s) for s in sorted(statuses))}): "
            "put its API key in the URL, as http://eval:KEY@host:port (README.md)"
        )
    unreachable = [row for row in rows if any(mark in row["error"] for mark in _UNREACHABLE)]
    if len(unreachable) == len(rows):
        return (
            f"no bridge answered at {where} ({unreachable[0]['error']}): start it and wait for its /readyz "
            "(README.md), or fix --resources-url"
        )
    return None


class FixedAnswerSolver:
    """Not a model: answers every row with the same text (a stand-in, so the scores are Gym's
    verdicts on a known answer: right on the rows whose gold label it matches, wrong on the others)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def solve(self, task: SeedResult) -> SolveResult:
        return SolveResult(response=self.answer)


def environment(args: argparse.Namespace, dataset: GymDataset) -> EvalEnvironment:
    if args.serve:
        return ManagedGymEnvironment(
            server_cmd=args.serve,
            host=args.host,
            port=args.port,
            startup_timeout=args.startup_timeout,
            protocol="native",
            dataset=dataset,
        )
    return GymEnvironment(args.resources_url, protocol="native", dataset=dataset)


async def evaluate(args: argparse.Namespace) -> list[dict[str, Any]]:
    dataset = GymDataset(args.data)
    env = environment(args, dataset)
    solver: Any = (
        GymSolver(args.agent_url, gym_agent="simple_agent", trust_reward=True)
        if args.agent_url
        else FixedAnswerSolver(args.answer)
    )
    out = Path(args.out or tempfile.mkdtemp(prefix="evaluator-"))
    await run_evaluation(
        env, solver, step_log_dir=out, skip_failed=True, max_system_retries=1, max_concurrent=args.concurrency
    )
    rows = []
    for line in (out / "verified_log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "problem_idx" not in record:
            continue  # the log's header line
        row: dict[str, Any] = {"row": record["problem_idx"], "reward": record.get("reward")}
        error = (record.get("scoring_details") or {}).get("error")
        if error:
            found = _STATUS.match(str(error))
            row["reward"] = None  # recorded as failed: the Evaluator's 0.0 there is no verdict
            row["status"] = int(found.group(1)) if found else None
            row["error"] = redacted(str(error).split(", url=")[0], args.resources_url)  # the key: not shown
        rows.append(row)
    return sorted(rows, key=lambda r: r["row"])


async def tools(args: argparse.Namespace) -> dict[str, Any]:
    backend = HttpToolBackend(args.resources_url)
    try:
        listed = await backend.list_tools() if args.list_tools else None
        called = []
        for name, arguments in args.call or []:
            result = await backend.call_tool(name, json.loads(arguments))
            called.append({"tool": name, "content": result.content, "is_error": result.is_error})
        return {"tools": listed, "calls": called}
    finally:
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--resources-url", help="a running bridge (credentials in the URL for an API key)")
    where.add_argument(
        "--serve", help="shell command the Evaluator runs to start the bridge ($PORT: its port)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="managed: where the started bridge is reached")
    parser.add_argument("--port", type=int, default=None, help="managed: its port (default: a free one)")
    parser.add_argument(
        "--startup-timeout", type=float, default=240.0, help="managed: seconds to wait for /health"
    )
    parser.add_argument("--data", help="Gym JSONL rows (e.g. a resources server's data/example.jsonl)")
    parser.add_argument("--answer", default="Judgement: Yes", help="FixedAnswerSolver's answer to every row")
    parser.add_argument("--agent-url", help="a Gym simple_agent server: GymSolver with Gym's reward")
    parser.add_argument("--out", help="the Evaluator's step logs (default: a temporary directory)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--list-tools", action="store_true", help="list tools with HttpToolBackend")
    parser.add_argument("--call", nargs=2, action="append", metavar=("TOOL", "JSON"), help="call a tool")
    args = parser.parse_args()
    if args.list_tools or args.call:
        if not args.resources_url:
            parser.error("--list-tools and --call need --resources-url")
    elif not args.data:
        parser.error("--data is required to evaluate")
    try:
        run(args)
    except Exception as exc:  # one line, never a traceback (it would show the key in the URL)
        what = "" if isinstance(exc, SetupFailed) else f"{type(exc).__name__}: "
        print(f"evaluate.py: {what}{redacted(str(exc), args.resources_url)}", file=sys.stderr)
        sys.exit(2)


def run(args: argparse.Namespace) -> None:
    if args.list_tools or args.call:
        print(json.dumps(asyncio.run(tools(args))))
        return
    rows = asyncio.run(evaluate(args))
    for row in rows:
        print(json.dumps(row))
    where = shown_url(args.resources_url) if args.resources_url else "the bridge the Evaluator started"
    failure = setup_failure(rows, where)
    if failure is not None:
        raise SetupFailed(f"no row was scored: {failure}")
    rewards = [r["reward"] for r in rows if r.get("reward") is not None]
    summary = {
        "rows": len(rows),
        "scored": len(rewards),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
    }
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
