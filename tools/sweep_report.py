"""What a compatibility sweep (``tools/sweep.py``) finds for one environment, and how it reads:
the result of each environment (``EnvResult``), why a start or a native score failed in a user's words
(from the bridge's one-line error and the upstream's answer), and the Markdown table of
docs/compatibility.md. Nothing here starts a process."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Why an environment does not start, where the one-line error does not say it all: each checked
# by hand against Gym's own code and this machine (the date is in docs/compatibility.md).
CHECKED = {
    "code_fim": "Gym's own runner installs its `pyproject.toml` with `--no-sources`, so it gets PyPI's "
    "`human-eval-infilling` 2.15.0, which holds no `human_eval_infilling` module; the package it needs "
    "is a GitHub checkout (`tool.uv.sources`), and GitHub is not reachable here. Gym fails the same way.",
    "vlm_eval_kit": "`setup_webserver` runs a shell script (`/bin/sh`, where `source` is no command: "
    "the exit 127) that activates `.venv`, which only `ng_run` creates, and runs `git clone "
    "https://github.com/open-compass/VLMEvalKit`: GitHub is not reachable here (`Could not resolve host`).",
    "xstest": "`setup_webserver` waits, every 10 s and without end, for its judge model server "
    "(`allenai/wildguard` on vLLM, a GPU); no model is reachable here, so it never listens.",
    "bigcodebench": "at startup it builds a Python 3.10 venv with `uv venv --python 3.10` (uv finds only "
    "pyenv's inactive `python3.10` shim here) and then `pip install -r "
    "https://raw.githubusercontent.com/bigcode-project/bigcodebench/main/Requirements/requirements-eval.txt`"
    ": with pyenv's 3.10.13 put first on `PATH` it gets that far and stops there (GitHub is not reachable).",
    "gymnasium": "not a server: the `GymnasiumServer` base class the Gymnasium environments build on "
    "(its README: 'Not a standalone server').",
}


@dataclass
class EnvResult:
    env: str
    started: bool = False
    why: str = ""  # why it did not start, in a user's words
    tools: int = 0
    rollouts: int = 0
    native_scored: int = 0  # rollouts that got a reward natively
    parity: int = 0  # of those, bridged reward == native reward
    note: str = ""  # e.g. why rollouts did not score natively
    source: str = ""  # where the replayed cases come from, when not the shipped rollouts' rows
    native_error: str = ""  # the first native replay error, as it came
    start_s: float = 0.0
    mismatches: list[dict[str, Any]] = field(default_factory=list)


def user_reason(log: str) -> str:
    """Why a start failed, in a user's words, from the bridge's log."""
    lines = [line for line in log.splitlines() if line.strip()]
    text = "\n".join(lines)
    error = next((line for line in reversed(lines) if "gym-mcp-bridge:" in line), "")
    detail = error.split("gym-mcp-bridge: ", 1)[-1].split("; last log lines:")[0]
    if lines and "last log lines" in error:  # the child's own last words say why
        detail = f"{detail}: {lines[-1].strip().removeprefix('upstream_boot: ')}"
    checks = [
        (
            r"cannot install .*(Could not resolve host|git\+|github\.com)",
            "needs network (a requirement is fetched from GitHub)",
        ),
        (r"cannot install", "a requirement cannot be installed here"),
        (r"needs the config value '([^']*(api_key|token)[^']*)'", "needs an API key ({0})"),
        (r"needs the config value '([^']+)'", "needs a config value ({0})"),
        (r"(?i)cuda|nvidia-smi|no gpu|gpu", "needs a GPU"),
        (
            r"(?i)(Could not resolve host|Temporary failure in name resolution|huggingface\.co|ConnectError|Name or service not known)",
            "needs network",
        ),
        (r"(?i)(docker|podman|apptainer|singularity)", "needs a container runtime"),
        (r"(?i)sandbox", "needs a code sandbox service"),
        (r"(?i)(No such file or directory|FileNotFoundError)", "needs data files not shipped in the wheel"),
    ]
    for pattern, words in checks:
        found = re.search(pattern, text)
        if found:
            reason = words.format(*(g for g in found.groups() if g)) if "{0}" in words else words
            return f"{reason}: {short(detail or found.group(0))}"
    return short(detail) or "did not start (see the bridge log)"


def short(text: str, limit: int = 220) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def verify_reason(error: str, source: str = "") -> str:
    lowered = error.lower()
    if error.startswith("not reproducible"):
        return f"Gym's own rewards are {error}"
    if "rows not in example.jsonl" in source and not error.startswith("HTTP 5"):
        return f"{source}, and Gym refuses the records themselves as rows: {short(error, 160)}"
    if "configkeyerror" in lowered or "missing key" in lowered:  # asks the config for a model server
        return f"scoring needs a model (a judge or policy model server): {short(error, 160)}"
    if any(
        word in lowered for word in ("judge", "model", "policy", "responses_api_models", "/v1/", "openai")
    ):
        return f"scoring needs a model: {short(error, 160)}"
    if any(word in lowered for word in ("connect", "resolve host", "name resolution", "network")):
        return f"scoring needs network or a service: {short(error, 160)}"
    if "sandbox" in lowered:
        return f"scoring needs a code sandbox service: {short(error, 160)}"
    return f"does not score natively: {short(error, 160)}"


def parity_text(r: EnvResult) -> str:
    if not r.started:
        return "-"
    if r.rollouts == 0:
        return f"no rollouts shipped ({r.source})" if r.source else "no rollouts shipped"
    if r.native_scored == 0:
        return f"0/0 ({r.note or 'no rollout scored natively'})"
    text = f"{r.parity}/{r.native_scored}"
    notes = [r.source] if r.source and r.source.startswith("the rows'") else []
    if r.native_scored < r.rollouts:
        notes.append(f"{r.rollouts - r.native_scored} of {r.rollouts} did not score natively: {r.note}")
    return f"{text} ({'; '.join(notes)})" if notes else text


def run_facts(command: str, elapsed_s: float, gym_version: str) -> dict[str, Any]:
    """What the table's header says about a run, kept in its JSON so a re-render says the same."""
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 1024 / 1024:.0f} GB RAM"
    return {
        "command": command,
        "elapsed_s": elapsed_s,
        "gym_version": gym_version,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}",
    }


def markdown(results: list[EnvResult], run: dict[str, Any]) -> str:
    started = [r for r in results if r.started]
    scoring = [r for r in started if r.native_scored]
    full = [r for r in scoring if r.parity == r.native_scored]
    gym_version, command, elapsed_s = run["gym_version"], run["command"], run["elapsed_s"]
    lines = [
        "# Compatibility: every bundled Gym environment behind the bridge",
        "",
        "Generated by `make sweep` (`python -m tools.sweep`); do not edit by hand. Each environment of",
        f"the nemo-gym {gym_version} wheel that ships `data/example.jsonl` is started by name in managed mode",
        "(`gym-mcp-bridge serve --resources-server <env>`: its own environment from its `requirements.txt`, its",
        "directory as working directory, its config resolved), then each shipped rollout",
        "(`data/example_rollouts.jsonl`, joined with its row from `example.jsonl`) is replayed natively",
        "(straight to the upstream over Gym's HTTP, or its own `/mcp` for an MCP-native server) and bridged",
        "(seed, MCP `tools/call` with the official SDK client, `/verify` through the bridge) against the same",
        "upstream. *Parity* counts the rollouts that scored natively whose bridged reward equals the native one.",
        "Where no shipped rollout belongs to a shipped row but the rows carry `ground_truth` actions, those",
        "actions are replayed instead. A Gymnasium server (`GymnasiumServer`: `/reset` and `/step`, no",
        "`/verify`) is scored as Gym's `gymnasium_agent` scores it: `/reset`, then `/step` with each recorded",
        "model turn, rewards summed; natively twice (an environment whose rewards differ between the two is",
        "not reproducible, so no parity is claimed for it), and bridged with `reset` and `step` as MCP tools.",
        "",
        f"- Date: {run['date']}; machine: {run['machine']}; no GPU; network: package registries only; no model",
        f"- Command: `{command}` ({elapsed_s / 60:.0f} min)",
        f"- Started: **{len(started)}/{len(results)}**; scored natively: {len(scoring)}; full parity: "
        f"**{len(full)}/{len(scoring)}** environments, "
        f"{sum(r.parity for r in scoring)}/{sum(r.native_scored for r in scoring)} rollouts",
        "",
        "| environment | started | tools | reward parity (bridged = native) |",
        "|---|---|---|---|",
    ]
    for r in results:
        state = f"yes ({r.start_s:.0f} s)" if r.started else f"no: {r.why}"
        lines.append(f"| `{r.env}` | {state} | {r.tools if r.started else '-'} | {parity_text(r)} |")
    checked = [r.env for r in results if not r.started and r.env in CHECKED]
    if checked:
        lines += ["", "## Not started, checked by hand", ""]
        lines += [f"- `{env}`: {CHECKED[env]}" for env in checked]
    lines.append("")
    return "\n".join(lines)
