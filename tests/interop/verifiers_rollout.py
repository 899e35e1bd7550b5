"""Whole rollouts through Verifiers (``verifiers`` 0.4.0) on a NeMo Gym resources server.

Runs in the Verifiers environment (``.cache/verifiers-env``, built by
``tests/interop/verifiers_env.py``), not in the bridge's: ``python verifiers_rollout.py PLAN.json``.
For each run of the plan it calls Verifiers' own eval entry point (``run_eval``, the in-process
path of ``vf-eval``) with:

* the taskset ``nemo-gym`` (``verifiers.v1.tasksets.nemo_gym``) on a one-row JSONL dataset,
  ``task.resources_url`` = the run's URL (the bridge, or the Gym server directly), or
  ``verifiers_gym_http`` (the same taskset with the tools kept on ``POST /<tool>``);
* the ``null`` harness (Verifiers' bundled chat program: its own agent loop, MCP client and
  OpenAI client, run as a uv script) and Verifiers' interception server between it and the model;
* the model endpoint = the test's stub Chat Completions API; the run's ``model`` names the plan
  the stub replays.

The taskset's ``nemo_gym`` reward (``/verify`` with ``trace_to_nemo_response``) is the reward.
One JSON object per run is printed on stdout (a line starting ``VERIFIERS_RESULT ``).
"""

import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import verifiers
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig
from verifiers.v1.runtimes.subprocess import SubprocessRuntime
from verifiers.v1.tasksets.nemo_gym.response import trace_to_nemo_response

API_KEY_VAR = "VF_STUB_API_KEY"
HARNESS_PACKAGES = ("openai", "mcp", "httpx", "httpx2", "tenacity", "certifi")


def harness_packages() -> dict[str, str]:
    """The versions in the uv environment Verifiers prepared for the harness's PEP 723 script."""
    found: dict[str, str] = {}
    for interpreter in SubprocessRuntime._interpreters.values():
        code = (
            "import importlib.metadata as m, json, sys; "
            "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
        )
        out = subprocess.run([interpreter, "-c", code, *HARNESS_PACKAGES], capture_output=True, text=True)
        found.update(json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-500:]})
    return found


def eval_config(run: dict[str, Any], plan: dict[str, Any], dataset: Path) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "env": {
                "taskset": {
                    "id": run["taskset"],
                    "dataset": str(dataset),
                    "task": {"resources_url": run["resources_url"], "request_timeout": 60},
                },
                "agent": {
                    "harness": {"id": "null"},
                    "runtime": {"type": "subprocess"},  # the default is a Prime sandbox
                    "max_turns": run.get("max_turns", 8),
                    "timeout": {"rollout": 240, "scoring": 120},
                },
            },
            "model": run["model"],
            "client": {"type": "eval", "base_url": plan["stub_base_url"], "api_key_var": API_KEY_VAR},
            "num_rollouts": 1,
            "max_concurrent": 1,
            "rich": None,
            "push": False,
            "output_dir": plan["work_dir"],
            "run": {"dir": run["label"]},
        }
    )


async def one(run: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    work = Path(plan["work_dir"])
    dataset = work / f"{run['label']}.jsonl"
    dataset.write_text(json.dumps(run["row"]) + "\n")
    started = time.monotonic()
    episodes = await run_eval(eval_config(run, plan, dataset))
    traces = [trace for episode in episodes for trace in episode.traces]
    assert len(traces) == 1, [e.errors for e in episodes]
    trace = traces[0]
    offered = [tool.name for tool in trace.tools]
    params = run["row"]["responses_create_params"]
    try:
        response = trace_to_nemo_response(trace, params, offered)
    except ValueError as exc:  # no branch: the rollout failed before the model answered
        response = {"error": str(exc)}
    return {
        "label": run["label"],
        "seconds": round(time.monotonic() - started, 1),
        "verifiers": verifiers.__version__,
        "ok": trace.ok,
        "errors": [error.model_dump(mode="json") for error in [*trace.errors, *episodes[0].errors]],
        "stop_condition": trace.stop_condition,
        "reward": trace.reward,
        "rewards": {k: (v.score if v is not None else None) for k, v in trace.rewards.items()},
        "offered": offered,
        "emitted": [o["name"] for o in response.get("output", []) if o.get("type") == "function_call"],
        "response": response,
        "info": trace.info,
        "mcp_url": getattr(trace.state, "mcp_url", None),
        "harness_packages": harness_packages(),
    }


async def main(plan: dict[str, Any]) -> None:
    for run in plan["runs"]:
        result = await one(run, plan)
        print("VERIFIERS_RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text())))
