"""Run inside the nemo-gym 0.7.0 environment (``.gym-env-0.7.0/bin/python``): Gym's head server plus
nemo-gym 0.7.0's own harness agent servers (and, when asked, a Gym resources server with Gym's
in-process MCP exposure), each started the way ``gym env start`` starts a server.

usage: gym07_agents.py '<JSON plan>'

    {"head": {"host": str, "port": int},
     "resources": {"<instance>": {"env": str, "host": str, "port": int, "serve": bool}},
     "models": {"<instance>": {"host": str, "port": int}},   # optional: model servers (addresses)
     "agents": {"<instance>": {"agent": "<responses_api_agents folder>", "resources": "<instance>",
                               "port": int, "config": {...}}},
     "path": [str, ...],          # prepended to PATH: the pinned CLIs' bin folders
     "relays": bool,              # optional: start the generated legacy_agent relays too (one Ray cluster)
     "log_dir": str, "ready_file": str}

The global config is built as Gym's runner builds it (``GlobalConfigDictParser().parse``): each
agent's block is the agent's own shipped ``configs/<agent>.yaml`` with the test's values laid over
it (host, port, ``resources_server.name``, the stub model's URL, the CLI version); a resources
instance with ``serve: false`` is only an address (the bridge); with ``serve: true`` it is the
environment's own shipped ``resources_servers`` block with ``expose_tools_over_mcp: true`` (Gym
0.7.0's in-process MCP exposure) and is started here too. A ``models`` instance is only an address
too: a ``responses_api_models`` entry the agents that name it in their shipped ``model_server``
(``policy_model`` for kilocode_agent and cline_agent) resolve their model URL from (a stub model
server the test runs), never started here.

Then, as ``nemo_gym.cli.env`` does after resolving the config: the head server runs in this process
(``HeadServer.run_webserver()``), and every server is its own process, ``python app.py`` in its
folder with ``NEMO_GYM_CONFIG_DICT`` (the resolved config) and ``NEMO_GYM_CONFIG_PATH`` (its
instance name). What Gym's CLI adds and this leaves out: a uv venv per server (this environment
serves them all, as ``skip_venv_if_present`` would) and a Ray cluster (none of these servers uses
Ray). When every server answers, ``ready_file`` receives the global config as JSON. On SIGTERM the
servers are stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

plan = json.loads(sys.argv[1])

import nemo_gym  # noqa: E402
from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

SITE = Path(nemo_gym.__file__).resolve().parent.parent


def shipped_block(kind: str, folder: str, config_name: str | None = None) -> dict[str, Any]:
    """The first ``<kind>.<folder>`` block of the folder's own shipped config file."""
    path = SITE / kind / folder / "configs" / f"{config_name or folder}.yaml"
    for top in OmegaConf.to_container(OmegaConf.load(path)).values():
        if isinstance(top, dict) and folder in (top.get(kind) or {}):
            return dict(top[kind][folder])
    raise SystemExit(f"gym07_agents: no {kind}.{folder} block in {path}")


initial: dict[str, Any] = {"head_server": plan["head"]}
external = {name for name, spec in plan["resources"].items() if not spec.get("serve")}
for instance, spec in plan["resources"].items():
    # Gym 0.7's parser needs an entrypoint on every server instance, even one it does not start
    block: dict[str, Any] = {
        "entrypoint": "app.py",
        "host": spec["host"],
        "port": spec["port"],
        "domain": "agent",
    }
    if spec.get("serve"):
        block = {**shipped_block("resources_servers", spec["env"]), **block, "expose_tools_over_mcp": True}
    initial[instance] = {"resources_servers": {spec["env"]: block}}
for instance, spec in (plan.get("models") or {}).items():
    external.add(instance)
    block = {"entrypoint": "app.py", "host": spec["host"], "port": spec["port"]}
    initial[instance] = {"responses_api_models": {"stub_model": block}}
for instance, spec in plan["agents"].items():
    block = shipped_block("responses_api_agents", spec["agent"])
    block.update(spec.get("config") or {})
    block.update(host="127.0.0.1", port=spec["port"])
    block["resources_server"] = {"type": "resources_servers", "name": spec["resources"]}
    initial[instance] = {"responses_api_agents": {spec["agent"]: block}}

global_config = GlobalConfigDictParser().parse(
    GlobalConfigDictParserConfig(
        initial_global_config_dict=OmegaConf.create(initial),
        skip_load_from_cli=True,
        skip_load_from_dotenv=True,
    )
)
config_yaml = OmegaConf.to_yaml(global_config)
os.environ["NEMO_GYM_CONFIG_DICT"] = config_yaml
relays = bool(plan.get("relays"))
if relays:  # as nemo_gym.cli.env does: one Ray cluster started here, its address in every server's config
    from nemo_gym.global_config import maybe_get_global_config_dict
    from nemo_gym.server_utils import initialize_ray

    initialize_ray()
    global_config = maybe_get_global_config_dict()
    config_yaml = OmegaConf.to_yaml(global_config)
    os.environ["NEMO_GYM_CONFIG_DICT"] = config_yaml
# every instance with an entrypoint, as nemo_gym.cli.env walks them, except the external ones (the
# bridge) and the legacy_agent environment servers Gym 0.7 generates per agent: the test posts each
# row to the agent's /run itself (what such a relay forwards), and each relay would start a Ray
# cluster of its own (legacy_agent declares no ray_enabled), which times out on a loaded 2-core
# machine. The real road, Gym's launcher and ng_collect_rollouts with the relays and Ray as Gym starts
# them, runs claude_code_agent, codex_agent and simple_agent in tests/test_gym_launcher.py. With
# "relays" the relays are started too, on the one Ray cluster started above (as the launcher does), so
# that ng_collect_rollouts can post each row to them.
served: dict[str, tuple[Path, str, int]] = {}
for name, top in global_config.items():
    if name in external or not OmegaConf.is_dict(top):
        continue
    for kind, servers in top.items():
        if kind == "environment_servers" and not relays:
            continue
        for folder, server in servers.items() if OmegaConf.is_dict(servers) else ():
            if OmegaConf.is_dict(server) and "entrypoint" in server:
                served[str(name)] = (SITE / str(kind) / str(folder), str(server["host"]), int(server["port"]))
os.environ["PATH"] = os.pathsep.join([*plan.get("path", []), os.environ.get("PATH", "")])

from nemo_gym.server_utils import HeadServer  # noqa: E402

HeadServer.run_webserver()  # Gym's own: the head server in a thread of this process

log_dir = Path(plan["log_dir"])
children: dict[str, subprocess.Popen[bytes]] = {}
for instance, where in served.items():
    children[instance] = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=where[0],
        env={**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml, "NEMO_GYM_CONFIG_PATH": instance},
        stdout=(log_dir / f"{instance}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def stop(*_: object) -> None:
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + 10
    for child in children.values():
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
    raise SystemExit(0)


signal.signal(signal.SIGTERM, stop)


def answers(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=1) as response:
            return int(response.status) == 200
    except OSError:
        return False


waiting = dict(served)
deadline = time.monotonic() + float(plan.get("timeout", 600))
while waiting:
    for instance, child in children.items():
        if child.poll() is not None:
            tail = (log_dir / f"{instance}.log").read_text(errors="replace")[-3000:]
            print(f"gym07_agents: {instance} exited with {child.returncode}:\n{tail}", file=sys.stderr)
            stop()
    waiting = {k: v for k, v in waiting.items() if not answers(v[1], v[2])}
    if time.monotonic() > deadline:
        print(f"gym07_agents: not up in time: {sorted(waiting)}", file=sys.stderr)
        stop()
    time.sleep(0.2)

ready = Path(plan["ready_file"])
ready.with_suffix(".tmp").write_text(json.dumps(OmegaConf.to_container(global_config)))
ready.with_suffix(".tmp").replace(ready)
print(f"gym07_agents: head and {len(served)} servers up", file=sys.stderr, flush=True)
while True:
    time.sleep(3600)
