"""Gym's own launcher and collector, run as a user runs them: ``gym env start`` (nemo-gym 0.5+) or
``ng_run`` (0.4) from the project root with a config file, then ``ng_collect_rollouts``.

``Launcher.start`` runs the launcher in its own process group with its output in a log file and waits
for its own "All N / N servers ready" line (Gym polls every server's ``GET /`` and aborts when a server
process exits, so that line means every server, the bridge included, answered). ``collect`` runs the
collector against the launcher's head server; ``stop`` sends the SIGINT a user's Ctrl+C sends.

What differs from the README's two commands, and why (each is a documented launcher key):

* ``++uv_venv_dir``, ``++cache_dir``, ``++results_dir``, ``hydra.run.dir``: the launcher would write its
  server venvs, caches, results and Hydra's ``outputs/`` into the working directory, the checkout;
  the venvs go to ``.cache/gym-launcher/venvs-<version>`` (kept between runs, as a user's are).
* ``++uv_cache_dir``: uv's own cache instead of a fresh one per run (what a user's machine has).
* ``+head_server.host`` / ``+head_server.port``: 127.0.0.1 and a free port instead of 11000, which other Gym processes of the suite may hold.
* The environment: the CLIs' pinned npm sets on ``PATH``; the Gym environment's base interpreter and
  uv on ``PATH`` (Gym builds each server venv with ``uv venv --python <the launcher's version>``);
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` so that the Ray cluster the launcher starts binds loopback;
  and, where the interpreter is older than nemo-gym's declared ``Requires-Python`` (pyenv's 3.13.0
  here, nemo-gym 0.7.0 declares >= 3.13.14), a uv config file whose ``[pip] python-version`` is that
  minimum, so that Gym's ``uv pip install nemo-gym==<version>`` in each server venv accepts it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from benchmarks.procs import free_port
from tests.fixtures.bridges import read_jsonl
from tests.fixtures.harness import counter_solution
from tests.interop.stubs.gym_model_stub import Plan, StubPolicyEndpoint

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"All (\d+) / \d+ servers ready")
CONTROL = " Then stop."  # the control row's prompt: row 0's with this appended


@dataclass
class Case:
    row: dict[str, Any]
    plan: Plan
    kind: str  # "solution" (the stub replays the row's solution: 1.0) or "control" (one short: 0.0)


def shipped_rows(gym_python: Path, env: str) -> list[dict[str, Any]]:
    """An environment's ``data/example.jsonl`` rows as the Gym environment of ``gym_python`` ships them."""
    site = next((gym_python.parent.parent / "lib").glob("python3.*/site-packages"))
    path = site / "resources_servers" / env / "data" / "example.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def counter_cases(rows: list[dict[str, Any]], indices: Sequence[int] = (0, 1, 2)) -> list[Case]:
    """``example_session_state_mgmt`` rows (``indices``, 0-2 unless given) with their solutions, and a
    control: row 0 under another prompt (so that a stub behind a CLI, which keeps no row metadata,
    tells it apart), one short."""
    cases = [Case(rows[i], Plan(counter_solution(rows[i])), "solution") for i in indices]
    (name, args), *rest = counter_solution(rows[0])
    params = json.loads(json.dumps(rows[0]["responses_create_params"]))
    params["input"][0]["content"] += CONTROL
    control = {**rows[0], "responses_create_params": params}
    cases.append(Case(control, Plan([(name, {"count": args["count"] - 1}), *rest]), "control"))
    return cases


def policy(stub: StubPolicyEndpoint, cases: list[Case]) -> list[str]:
    """The stub as the policy of ``cases``: their plans registered, and the launcher keys of the
    example configs' ``openai_model`` pointing at it."""
    for case in cases:
        stub.add(case.row["responses_create_params"], case.plan)
    return [
        f"+policy_base_url={stub.root_url}/v1",
        "+policy_api_key=stub-key",
        "+policy_model_name=stub-model",
    ]


def bridge_audit_log(path: Path) -> str:
    """The launcher key that gives the example configs' bridge an audit log."""
    return f"++gym_mcp_bridge.resources_servers.gym_mcp_bridge.bridge.audit_log={path}"


def agent_in_front_of(example: Path, agent: str, resources: str) -> dict[str, Any]:
    """An example config's agent instance block, in front of the resources instance ``resources``."""
    block = yaml.safe_load(example.read_text())[agent]["responses_api_agents"][agent]
    pointed = {**block, "resources_server": {"type": "resources_servers", "name": resources}}
    return {"responses_api_agents": {agent: pointed}}


def in_process_exposure(env: str, instance: str, agents: dict[str, Path]) -> dict[str, Any]:
    """Gym 0.7's own in-process MCP exposure of ``env`` (``expose_tools_over_mcp: true``) as the
    instance ``instance``, and each example config's agent (agent name -> example file) in front of it
    as ``<agent>_in_process``: the reference the bridge's rewards are compared with."""
    config: dict[str, Any] = {
        instance: {
            "resources_servers": {
                env: {"entrypoint": "app.py", "domain": "agent", "expose_tools_over_mcp": True}
            }
        }
    }
    for agent, example in agents.items():
        config[f"{agent}_in_process"] = agent_in_front_of(example, agent, instance)
    return config


def uv_bin() -> Path:
    found = shutil.which("uv")
    return Path(found).parent if found else ROOT / ".cache" / "uv-venv" / "bin"


def base_python_bin(gym_python: Path) -> Path:
    """The folder of the interpreter a Gym venv was made from (``home`` in its ``pyvenv.cfg``)."""
    for line in (gym_python.parent.parent / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip())
    raise AssertionError(f"no home in the pyvenv.cfg of {gym_python}")


def declared_minimum(gym_python: Path) -> str | None:
    """nemo-gym's ``Requires-Python`` minimum when this interpreter is older than it, else None."""
    code = (
        "import importlib.metadata as m, platform; "
        "print(m.metadata('nemo-gym')['Requires-Python'] or '', platform.python_version())"
    )
    declared, have = subprocess.run(
        [str(gym_python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    minimum = declared.removeprefix(">=").strip()
    as_tuple = lambda v: tuple(int(p) for p in v.split("."))  # noqa: E731
    return minimum if re.fullmatch(r"[\d.]+", minimum) and as_tuple(have) < as_tuple(minimum) else None


@dataclass
class Launcher:
    gym_python: Path  # the Gym environment whose launcher and collector run
    command: str  # "gym env start" (0.5+) or "ng_run" (0.4)
    work: Path  # logs, results, the collector's outputs
    path: list[str] = field(default_factory=list)  # prepended to PATH: the CLIs' bin folders
    head_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    ready_s: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.work / "launcher.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @cached_property
    def environment(self) -> dict[str, str]:
        """The launcher's and the collector's environment (module docstring), made once."""
        env = {
            **os.environ,
            "PATH": os.pathsep.join(
                [*self.path, str(base_python_bin(self.gym_python)), str(uv_bin()), os.environ.get("PATH", "")]
            ),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        }
        env.pop("VIRTUAL_ENV", None)
        minimum = declared_minimum(self.gym_python)
        if minimum is not None:
            config = self.work / "uv.toml"
            config.write_text(f'[pip]\npython-version = "{minimum}"\n')
            env["UV_CONFIG_FILE"] = str(config)
        return env

    def _keys(self, version: str) -> list[str]:
        uv_cache = subprocess.run(
            [str(uv_bin() / "uv"), "cache", "dir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        return [
            f"++uv_venv_dir={ROOT / '.cache' / 'gym-launcher' / f'venvs-{version}'}",
            f"++cache_dir={self.work / 'cache'}",
            f"++uv_cache_dir={uv_cache}",
            f"++results_dir={self.work / 'results'}",
            f"hydra.run.dir={self.work / 'outputs'}",
            "+head_server.host=127.0.0.1",
            f"+head_server.port={self.head_port}",
        ]

    def start(
        self, config_paths: list[str], overrides: list[str], version: str, timeout_s: float = 1200
    ) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.head_port = self.head_port or free_port("127.0.0.1")
        program, *verbs = self.command.split()
        command = [
            str(self.gym_python.parent / program),
            *verbs,
            f"+config_paths=[{','.join(config_paths)}]",
            *overrides,
            *self._keys(version),
        ]
        started = time.monotonic()
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.environment,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        while READY.search(self.log()) is None:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.command} exited with {self.proc.returncode}:\n{self.log()[-6000:]}"
                )
            if time.monotonic() - started > timeout_s:
                raise AssertionError(
                    f"{self.command}: servers not ready after {timeout_s}s:\n{self.log()[-6000:]}"
                )
            time.sleep(1)
        self.ready_s = time.monotonic() - started

    def collector(
        self, rows: list[dict[str, Any]], name: str, keys: Sequence[str] = (), timeout_s: float = 900
    ) -> list[dict[str, Any]]:
        """``ng_collect_rollouts`` over ``rows`` (``<name>-rows.jsonl``), with the collector keys
        ``keys`` besides the head server's: the rollouts it wrote (``<name>-rollouts.jsonl``), its
        output in ``<name>-collect.log``."""
        given = self.work / f"{name}-rows.jsonl"
        given.write_text("".join(json.dumps(row) + "\n" for row in rows))
        out = self.work / f"{name}-rollouts.jsonl"
        result = subprocess.run(
            [
                str(self.gym_python.parent / "ng_collect_rollouts"),
                f"+input_jsonl_fpath={given}",
                f"+output_jsonl_fpath={out}",
                "+head_server.host=127.0.0.1",
                f"+head_server.port={self.head_port}",
                f"hydra.run.dir={self.work / 'outputs'}",
                *keys,
            ],
            cwd=self.work,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        (self.work / f"{name}-collect.log").write_text(result.stdout + result.stderr)
        assert result.returncode == 0, (
            f"ng_collect_rollouts failed:\n{(result.stdout + result.stderr)[-6000:]}"
        )
        return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]

    def failures(self, name: str) -> list[dict[str, Any]]:
        """The failures sidecar the collector wrote beside ``<name>-rollouts.jsonl`` (with
        ``+route_failures_to_sidecar=true``; nemo_gym.path_utils.failures_path_for)."""
        return read_jsonl(self.work / f"{name}-rollouts_failures.jsonl")

    def collect(
        self, agents: list[str], cases: list[Case], name: str, timeout_s: float = 900
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """``ng_collect_rollouts`` over every case's row for each agent (its ``agent_ref``): the
        rollouts it wrote, by (agent, case index)."""
        rows = [{**case.row, "agent_ref": {"name": agent}} for agent in agents for case in cases]
        rollouts = {}
        for rollout in self.collector(rows, name, timeout_s=timeout_s):
            task = int(rollout["_ng_task_index"])  # the row's index in the input
            rollouts[(agents[task // len(cases)], task % len(cases))] = rollout
        assert len(rollouts) == len(rows), f"{len(rollouts)} rollouts for {len(rows)} rows"
        return rollouts

    def stop(self, timeout_s: float = 60) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever the launcher left in its group
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
